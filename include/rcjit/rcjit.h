// The umbrella header: everything in rcjit's public API (namespace rcjit).
#pragma once
#include <rcjit/Autograd.h>
#include <rcjit/Cache.h>
#include <rcjit/Compile.h>
#include <rcjit/Cuda.h>
#include <rcjit/Dist.h>
#include <rcjit/Error.h>
#include <rcjit/Logs.h>
#include <rcjit/Memory.h>
#include <rcjit/Ops.h>
#include <rcjit/Optim.h>
#include <rcjit/Passes.h>
#include <rcjit/Region.h>
#include <rcjit/Tensor.h>
#include <rcjit/Types.h>
#include <rcjit/nn.h>
