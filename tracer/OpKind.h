// Forwarding header: the op table is public (include/rcjit/ir/OpKind.h).
#pragma once
#include <rcjit/ir/OpKind.h>
