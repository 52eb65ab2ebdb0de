// rcjit::dist inside the compiler: graph passes that place collectives (Dist.h's ops of the
// IR) into compiled training graphs.
#pragma once
#include <cstdint>

#include <rcjit/Passes.h>

namespace rcjit::dist {

/// Compiled data parallelism as a scheduled pass (register it with register_scheduled_pass
/// and name it in CompileOptions::schedule). In the backward graph of a full-mode training
/// entry (PassContext: backward, not a regional stage or a segment) every gradient output
/// becomes its mean over the ranks: the gradients, in the order the backward computes them,
/// are flattened and concatenated into buckets of about `bucket_bytes` (one dtype per
/// bucket, f32 or f64; a larger gradient is a bucket of its own), and each bucket's
/// all_reduce(mean) node is placed right after the node that completes it, so the compiled
/// program starts it while the rest of the backward runs and waits for it at the end. Every
/// other graph is returned unchanged. Meant for functions whose gradients are all
/// parameters' (data inputs need none): an input's gradient would be averaged too. The
/// graph is made for this job's world size (dist::world_size()). Throws rcjit::Error for a
/// gradient of another dtype (f16, bf16: not reducible) and for bucket_bytes <= 0.
ScheduledPassFn ddp_gradient_pass(int64_t bucket_bytes = int64_t{25} << 20);

} // namespace rcjit::dist
