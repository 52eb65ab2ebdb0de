// Forwarding header: the graph IR is public (include/rcjit/ir/Graph.h).
#pragma once
#include <rcjit/ir/Graph.h>
