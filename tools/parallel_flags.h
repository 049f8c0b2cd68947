// The multi-GPU flags of autoglm-run, autoglm-bench and autoglm-serve:
// --tp N, --devices 0,1,..., --nnodes N, --node-rank R, --master ADDR:PORT, --embedding-on-host.
#ifndef AUTOGLM_TOOLS_PARALLEL_FLAGS_H_
#define AUTOGLM_TOOLS_PARALLEL_FLAGS_H_

#include "tools/common.h"

namespace ag::tools {

ParallelOptions ParallelFlags();

}  // namespace ag::tools

#endif  // AUTOGLM_TOOLS_PARALLEL_FLAGS_H_
