// Builds the tensor-parallel data plane (docs/tensor-parallel.md): one stack per rank (backend on
// device r, model shard, policy over the rank's kv heads, KV pool), ONE KvManager whose block ids
// index every rank's pool, and the executor that runs the ranks' runners on their threads.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "attention/policy_registry.h"
#include "backend/backend_factory.h"
#include "backend/communicator.h"
#include "backend/cpu/cpu_communicator.h"
#include "core/log.h"
#include "io/gguf_model.h"
#include "io/model_config.h"
#include "model/dummy_weights.h"
#include "model/model_stack.h"
#include "model/tensor_parallel.h"
#include "model/tensor_parallel_executor.h"

namespace ls {

namespace {

Result<std::vector<std::unique_ptr<Communicator>>> make_communicators(
    const ModelStackOptions& o, const std::vector<Backend*>& backends) {
  if (o.device == "cpu") return make_cpu_communicators(static_cast<int32_t>(backends.size()));
  DeviceCommOptions co;
  co.all_reduce = o.tp_all_reduce;
  return make_device_communicators(backends, co);
}

// A rank's retrieval and streaming head-pages (kv heads over all layers).
std::string describe_rank(const KvGeometry& g) {
  return fmt::format("{} retrieval + {} streaming head-pages per block over {} layers",
                     g.roles.num_retrieval(), g.roles.num_streaming(), g.num_layers);
}

// Why the ranks must be built one at a time, or empty when they can be built at once: a rank
// whose weights pass through host memory in a converted or generated form holds 1/N of the
// model there (GGUF: the whole model) until it is uploaded, so building N at once would hold it
// all. Float safetensors ranks read their row slices in place and copy only column slices.
std::string one_at_a_time_because(const ModelStackOptions& o, const ModelConfig& config) {
  Result<LoadFormat> format = parse_load_format(o.load_format);
  if (format.ok() && *format == LoadFormat::kDummy) return "each generates its weights on the host";
  Result<std::optional<std::filesystem::path>> gguf = find_gguf_model(o.model_dir);
  if (!gguf.ok()) return "the model's format is not known yet";  // the rank's load reports it
  if (gguf->has_value()) return "each dequantizes the whole GGUF model on the host";
  if (config.fp8_weights()) return "each converts its slices of the FP8 checkpoint on the host";
  return {};
}

}  // namespace

Result<std::unique_ptr<ModelStack>> build_tensor_parallel_stack(const ModelStackOptions& o) {
  const int32_t n = o.tensor_parallel_size;
  if (o.device == "cpu" && o.tp_all_reduce == "p2p") {
    return invalid_argument("--tp-all-reduce p2p needs GPUs with peer access (--device cuda)");
  }
  // NVLink multicast (NVLS) stays off: the GPU machines forbid it (docs/tensor-parallel.md).
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  LS_ASSIGN_OR_RETURN(ModelConfig full, load_model_config(o.model_dir));
  LS_ASSIGN_OR_RETURN(TpLayout layout, make_tp_layout(full, n));

  auto top = std::make_unique<ModelStack>();
  // The whole model's policy: its head roles are the KvManager's (whether any head streams or
  // retrieves), and decide which kv heads each rank owns, so that every rank gets an even share
  // of the retrieval heads in every layer.
  PolicyModelInfo info;
  info.num_layers = static_cast<int32_t>(full.num_hidden_layers());
  info.num_q_heads = static_cast<int32_t>(full.num_attention_heads());
  info.num_kv_heads = static_cast<int32_t>(full.num_key_value_heads());
  info.head_dim = static_cast<int32_t>(full.head_dim());
  LS_ASSIGN_OR_RETURN(top->policy, make_attention_policy(o.attention, info));
  const HeadRoles& roles = top->policy->kv_geometry().roles;
  std::vector<bool> streaming;
  for (int32_t l = 0; l < info.num_layers; ++l) {
    for (int32_t h = 0; h < info.num_kv_heads; ++h) streaming.push_back(roles.is_streaming(l, h));
  }
  layout.balance_roles(streaming);

  // The ranks are built at once, each on its own thread with its device current, unless their
  // weights pass through host memory converted or generated (one_at_a_time_because). The
  // automatic host KV pool's share of RAM is read once here: 1/N of half the free RAM each.
  const std::string one_at_a_time = one_at_a_time_because(o, full);
  const int64_t host_kv_share = free_ram_bytes() / 2 / n;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Result<std::unique_ptr<ModelStack>>> built;
  for (int32_t r = 0; r < n; ++r) built.emplace_back(internal_error("not built"));
  auto build_rank = [&](unsigned r) {
    ModelStackOptions ro = o;
    ro.tensor_parallel_size = 1;
    ro.tp_rank = static_cast<int32_t>(r);
    ro.tp_ranks = n;
    ro.tp_kv_order = layout.kv_order;
    if (ro.auto_host_kv_share_bytes == 0) ro.auto_host_kv_share_bytes = host_kv_share;
    try {
      built[r] = build_model_stack(ro);
    } catch (const std::bad_alloc&) {
      built[r] = resource_exhausted("out of host memory");
    } catch (const std::exception& e) {
      built[r] = internal_error("{}", e.what());
    } catch (...) {
      built[r] = internal_error("an exception that is not a std::exception");
    }
  };
  Status failed;
  if (!one_at_a_time.empty()) {
    for (int32_t r = 0; r < n; ++r) {
      build_rank(static_cast<unsigned>(r));
      if (!built[static_cast<size_t>(r)].ok()) break;  // the later ranks would fail alike
    }
  } else {
    failed = run_on_threads(static_cast<unsigned>(n), build_rank);
  }
  // Every built rank joins the stack before any error returns: the stack's destructor frees each
  // with its own device current.
  for (int32_t r = 0; r < n; ++r) {
    Result<std::unique_ptr<ModelStack>>& rank = built[static_cast<size_t>(r)];
    if (rank.ok()) {
      top->tp_ranks.push_back(std::move(*rank));
    } else if (failed.ok()) {
      failed = rank.status().with_context(fmt::format("tensor-parallel rank {}", r));
    }
  }
  LS_RETURN_IF_ERROR(failed);
  LS_LOG_INFO("tensor parallel: {} ranks built in {:.1f} s ({})", n,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              one_at_a_time.empty() ? "at once" : "one at a time: " + one_at_a_time);
  ModelStack& rank0 = *top->tp_ranks[0];
  top->max_model_len = rank0.max_model_len;
  top->tp_full_config = full;

  // One KvManager whose block ids every rank's pool holds: the smallest pool bounds them.
  KvGeometry g = rank0.kv->geometry();
  g.num_kv_heads = info.num_kv_heads;
  g.roles = roles;
  int32_t retrieval_blocks = -1, streaming_blocks = -1;
  for (const auto& rank : top->tp_ranks) {
    const KvGeometry& rg = rank->kv->geometry();
    if (rg.roles.num_retrieval() > 0) {
      const int32_t b = rank->kv->num_retrieval_blocks();
      retrieval_blocks = retrieval_blocks < 0 ? b : std::min(retrieval_blocks, b);
    }
    if (rg.roles.num_streaming() > 0) {
      const int32_t b = rank->kv->num_streaming_blocks();
      streaming_blocks = streaming_blocks < 0 ? b : std::min(streaming_blocks, b);
    }
  }
  top->kv = std::make_unique<KvManager>(g, std::max(0, retrieval_blocks),
                                        std::max(0, streaming_blocks), o.max_num_seqs);

  std::vector<Backend*> backends;
  for (const auto& rank : top->tp_ranks) backends.push_back(rank->backend.get());
  LS_ASSIGN_OR_RETURN(top->tp_comms, make_communicators(o, backends));

  std::vector<TensorParallelExecutor::Rank> exec_ranks;
  for (int32_t r = 0; r < n; ++r) {
    ModelStack& rank = *top->tp_ranks[static_cast<size_t>(r)];
    // The rank's runner reads the shared KvManager's block tables; its own manager goes.
    const RunnerConfig rc = rank.runner->config();
    rank.backend->bind_thread();
    rank.runner.reset();
    LS_ASSIGN_OR_RETURN(rank.runner,
                        ModelRunner::create(*rank.model, *top->kv, *rank.pool, *rank.policy, rc));
    rank.kv.reset();
    rank.runner->set_communicator(top->tp_comms[static_cast<size_t>(r)].get());
    exec_ranks.push_back({rank.runner.get(), rank.backend.get(),
                          top->tp_comms[static_cast<size_t>(r)].get()});
    const KvGeometry& rg = rank.policy->kv_geometry();
    std::vector<int32_t> layer0;  // the rank's kv heads in layer 0
    for (int64_t j = 0; j < layout.kv_heads_per_rank; ++j) {
      layer0.push_back(static_cast<int32_t>(layout.kv_head(0, r, j)));
    }
    LS_LOG_INFO("tensor-parallel rank {} on {}: {} q heads, kv heads {} in layer 0{}{}, MLP "
                "columns [{}, {}), {}",
                r, rank.backend->name(), layout.q_heads_per_rank, fmt::join(layer0, ","),
                layout.kv_order.empty() ? "" : " (chosen per layer to balance retrieval heads)",
                layout.kv_replicas > 1 ? fmt::format(" (replicated on {} ranks)", layout.kv_replicas)
                                       : std::string(),
                r * layout.inter_per_rank, (r + 1) * layout.inter_per_rank, describe_rank(rg));
  }
  // Selection and decode attention cost scale with a rank's retrieval heads: the slowest rank
  // (most retrieval heads) sets the step time.
  std::vector<int32_t> retrieval_per_rank, streaming_per_rank;
  int64_t total = 0;
  for (const auto& rank : top->tp_ranks) {
    retrieval_per_rank.push_back(rank->policy->kv_geometry().roles.num_retrieval());
    streaming_per_rank.push_back(rank->policy->kv_geometry().roles.num_streaming());
    total += retrieval_per_rank.back();
  }
  const double mean = static_cast<double>(total) / n;
  const int32_t most = *std::max_element(retrieval_per_rank.begin(), retrieval_per_rank.end());
  LS_LOG_INFO("tensor parallel over {} ranks ({} communicator): retrieval kv heads per rank (all "
              "layers) {}, imbalance {:.2f} (most / mean); {} retrieval blocks, {} streaming "
              "blocks shared by every rank's pool",
              n, top->tp_comms[0]->name(), fmt::join(retrieval_per_rank, ", "),
              mean > 0 ? most / mean : 1.0, top->kv->num_retrieval_blocks(),
              top->kv->num_streaming_blocks());
  auto executor = std::make_unique<TensorParallelExecutor>(std::move(exec_ranks));
  executor->set_head_roles(retrieval_per_rank, streaming_per_rank);  // for /metrics
  LS_RETURN_IF_ERROR(executor->set_fault(o.tp_fault));
  top->tp_executor = std::move(executor);
  return top;
}

}  // namespace ls
