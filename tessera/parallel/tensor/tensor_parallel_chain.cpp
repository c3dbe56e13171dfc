#include "tessera/parallel/tensor/tensor_parallel_chain.h"

namespace tessera::parallel::tensor {

TensorParallelChain tensor_parallel_chain(const nn::CharTransformer&, dist::ProcessGroupPtr) {
  throw NotSupportedError("[tensor parallel] not built yet");
}

}  // namespace tessera::parallel::tensor
