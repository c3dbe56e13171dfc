// Everything a training program needs, in one include.
#pragma once
#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/gradcheck.h"
#include "tessera/core/tensor.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/models.h"
#include "tessera/nn/transformer.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/lr_scheduler.h"
#include "tessera/optim/sgd.h"
#include "tessera/util/thread_pool.h"
