// The CUDA backend's dense ops against the CPU backend (f32 math on the same rounded inputs) or a
// naive double-precision reference (linear): bf16, f16 and f32 tensors, vectorised and scalar
// shapes, aliasing, out-of-range ids. Outputs are poisoned with NaN first, so an unwritten element
// fails.

#include <gtest/gtest.h>

#include <random>

#include "backend/cpu/cpu_backend.h"
#include "cuda_test_util.h"

namespace ls::cuda_test {
namespace {

CpuBackend& cpu() {
  static CpuBackend backend(2);
  return backend;
}

TensorView dev(const DeviceArray& a, DType dt, std::initializer_list<int64_t> shape) {
  return TensorView(a.data(), dt, shape, Device::kCuda);
}

TensorView host(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return TensorView(v.data(), DType::kF32, shape, Device::kCpu);
}

const DType kDtypes[] = {DType::kBF16, DType::kF16, DType::kF32};

TEST(CudaElementwise, RmsNormMatchesCpu) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(11);
  // Rows past 1024 elements of up to 4 vectors per thread take the register-cached kernel (decode:
  // one row of 4096), partly filled chunks included (1032, 2056, 6144); longer rows (8192 f32,
  // 20000) the two-pass one.
  const std::pair<int64_t, int64_t> shapes[] = {
      {1, 64},   {3, 128},  {17, 1000}, {5, 4096}, {2, 5120}, {9, 96},   {40, 130},
      {1, 4096}, {2, 1032}, {1, 2056},  {3, 8192}, {1, 6144}, {2, 20000}};
  for (DType dt : kDtypes) {
    for (auto [rows, dim] : shapes) {
      for (bool alias : {false, true}) {
        HostArray x = random_array(rng, rows * dim, dt, -3, 3);
        std::vector<float> w(static_cast<size_t>(dim));
        std::uniform_real_distribution<float> wd(0.5f, 1.5f);
        for (auto& v : w) v = wd(rng);
        DeviceArray dx = DeviceArray::of(x), dw = DeviceArray::of(w);
        DeviceArray dout(static_cast<int64_t>(x.bytes.size()));
        dout.poison(dt, rows * dim);
        const DeviceArray& target = alias ? dx : dout;
        gpu()->rmsnorm(dev(dx, dt, {rows, dim}), dev(dw, DType::kF32, {dim}), 1e-5f,
                       dev(target, dt, {rows, dim}));
        std::vector<float> xin = x.values, ref(xin.size()), wv = w;
        cpu().rmsnorm(host(xin, {rows, dim}), host(wv, {dim}), 1e-5f, host(ref, {rows, dim}));
        EXPECT_TRUE(
            close_to(target.download_floats(dt, rows * dim), ref, rel_tol(dt) / 2, rel_tol(dt)))
            << dtype_label(dt) << " rows " << rows << " dim " << dim << " alias " << alias;
      }
    }
  }
}

TEST(CudaElementwise, AddRmsNormMatchesCpu) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(12);
  for (DType dt : kDtypes) {
    for (auto [rows, dim] : {std::pair<int64_t, int64_t>{4, 256},
                             {3, 4096},
                             {7, 72},
                             {1, 4096},
                             {2, 8192},
                             {1, 2056}}) {
      HostArray x = random_array(rng, rows * dim, dt, -2, 2);
      HostArray r = random_array(rng, rows * dim, dt, -2, 2);
      std::vector<float> w(static_cast<size_t>(dim), 0.0f);
      std::uniform_real_distribution<float> wd(0.5f, 1.5f);
      for (auto& v : w) v = wd(rng);
      DeviceArray dx = DeviceArray::of(x), dr = DeviceArray::of(r), dw = DeviceArray::of(w);
      DeviceArray dout(static_cast<int64_t>(x.bytes.size()));
      dout.poison(dt, rows * dim);
      gpu()->add_rmsnorm(dev(dx, dt, {rows, dim}), dev(dr, dt, {rows, dim}),
                         dev(dw, DType::kF32, {dim}), 1e-6f, dev(dout, dt, {rows, dim}));
      // Reference: the sum rounded to the dtype (what an unfused add stores), then the norm.
      HostArray sum(rows * dim, dt);
      for (int64_t i = 0; i < rows * dim; ++i) {
        sum.set(i, x.values[static_cast<size_t>(i)] + r.values[static_cast<size_t>(i)]);
      }
      std::vector<float> s = sum.values, ref(s.size());
      cpu().rmsnorm(host(s, {rows, dim}), host(w, {dim}), 1e-6f, host(ref, {rows, dim}));
      EXPECT_TRUE(close_to(dout.download_floats(dt, rows * dim), ref, rel_tol(dt) / 2, rel_tol(dt)))
          << dtype_label(dt) << " dim " << dim;
      // x holds the rounded sum exactly.
      EXPECT_EQ(dx.download(), sum.bytes) << dtype_label(dt);
    }
  }
}

TEST(CudaElementwise, RopeMatchesCpuToTheUlp) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(13);
  struct Shape {
    int64_t tokens, heads, head_dim, rotary;
  };
  for (DType dt : kDtypes) {
    for (Shape sh : {Shape{5, 4, 64, 64}, Shape{3, 8, 128, 128}, Shape{7, 2, 128, 64},
                     Shape{1, 32, 96, 96}, Shape{9, 3, 16, 8}}) {
      const int64_t n = sh.tokens * sh.heads * sh.head_dim, half = sh.rotary / 2;
      HostArray x = random_array(rng, n, dt, -4, 4);
      std::vector<float> cs(static_cast<size_t>(sh.tokens * half)), sn(cs.size());
      std::uniform_real_distribution<float> ang(-3.14f, 3.14f);
      for (size_t i = 0; i < cs.size(); ++i) {
        const float a = ang(rng);
        cs[i] = std::cos(a) * 1.1f;
        sn[i] = std::sin(a) * 1.1f;
      }
      DeviceArray dx = DeviceArray::of(x), dc = DeviceArray::of(cs), ds = DeviceArray::of(sn);
      gpu()->rope(dev(dx, dt, {sh.tokens, sh.heads, sh.head_dim}),
                  dev(dc, DType::kF32, {sh.tokens, half}), dev(ds, DType::kF32, {sh.tokens, half}),
                  sh.rotary);
      std::vector<float> ref = x.values;
      cpu().rope(host(ref, {sh.tokens, sh.heads, sh.head_dim}), host(cs, {sh.tokens, half}),
                 host(sn, {sh.tokens, half}), sh.rotary);
      HostArray rounded(n, dt);
      for (int64_t i = 0; i < n; ++i) rounded.set(i, ref[static_cast<size_t>(i)]);
      // Same separately rounded f32 products and differences, then one rounding: identical.
      const std::vector<float> got = dx.download_floats(dt, n);
      int mismatches = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (got[static_cast<size_t>(i)] != rounded.values[static_cast<size_t>(i)]) ++mismatches;
      }
      EXPECT_EQ(mismatches, 0) << dtype_label(dt) << " head_dim " << sh.head_dim << " rotary "
                               << sh.rotary;
    }
  }
}

// The fused split + per-head norm + RoPE against the separate GPU ops on the split tensors:
// identical without the norm (same rope arithmetic), within rounding with it (the sum of squares
// is added in another order).
TEST(CudaElementwise, QkvSplitRopeMatchesSeparateOps) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(17);
  struct Shape {
    int64_t tokens, q_heads, kv_heads, head_dim, rotary;
  };
  for (DType dt : kDtypes) {
    // The shapes cover both kernels (16-byte vectors: head_dim and half the rotary dims multiples
    // of a vector, at most 32 vectors a head; else one warp per head), the vector kernel's
    // power-of-two groups, groups of 12 and 24 lanes (96 / 8, 96 / 4) and partial rotary dims; the
    // last two put q, k and v heads of many tokens into one warp and spread them over blocks.
    for (Shape sh : {Shape{1, 32, 8, 128, 128}, Shape{5, 4, 2, 64, 64}, Shape{3, 6, 6, 96, 64},
                     Shape{7, 16, 2, 256, 256}, Shape{2, 3, 1, 16, 8}, Shape{67, 7, 1, 128, 128},
                     Shape{300, 5, 3, 96, 96}}) {
      for (bool norm : {false, true}) {
        const int64_t T = sh.tokens, D = sh.head_dim, half = sh.rotary / 2;
        const int64_t qn = sh.q_heads * D, kn = sh.kv_heads * D, row = qn + 2 * kn;
        HostArray qkv = random_array(rng, T * row, dt, -3, 3);
        std::vector<float> cs(static_cast<size_t>(T * half)), sn(cs.size());
        std::uniform_real_distribution<float> ang(-3.14f, 3.14f), wd(0.5f, 1.5f);
        for (size_t i = 0; i < cs.size(); ++i) {
          const float a = ang(rng);
          cs[i] = std::cos(a);
          sn[i] = std::sin(a);
        }
        std::vector<float> qw(static_cast<size_t>(D)), kw(qw.size());
        for (auto& v : qw) v = wd(rng);
        for (auto& v : kw) v = wd(rng);
        // Host split of the rounded inputs.
        HostArray q(T * qn, dt), k(T * kn, dt), v(T * kn, dt);
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t i = 0; i < qn; ++i) q.set(t * qn + i, qkv.values[static_cast<size_t>(t * row + i)]);
          for (int64_t i = 0; i < kn; ++i) {
            k.set(t * kn + i, qkv.values[static_cast<size_t>(t * row + qn + i)]);
            v.set(t * kn + i, qkv.values[static_cast<size_t>(t * row + qn + kn + i)]);
          }
        }
        DeviceArray dqkv = DeviceArray::of(qkv), dc = DeviceArray::of(cs), ds = DeviceArray::of(sn),
                    dqw = DeviceArray::of(qw), dkw = DeviceArray::of(kw);
        DeviceArray fq(static_cast<int64_t>(q.bytes.size())), fk(static_cast<int64_t>(k.bytes.size())),
            fv(static_cast<int64_t>(v.bytes.size()));
        fq.poison(dt, T * qn);
        fk.poison(dt, T * kn);
        fv.poison(dt, T * kn);
        const TensorView no_norm;
        gpu()->qkv_split_rope(dev(dqkv, dt, {T, row}), norm ? dev(dqw, DType::kF32, {D}) : no_norm,
                              norm ? dev(dkw, DType::kF32, {D}) : no_norm, 1e-6f,
                              dev(dc, DType::kF32, {T, half}), dev(ds, DType::kF32, {T, half}),
                              sh.rotary, dev(fq, dt, {T, sh.q_heads, D}),
                              dev(fk, dt, {T, sh.kv_heads, D}), dev(fv, dt, {T, sh.kv_heads, D}));
        // Reference: the separate ops on the split tensors.
        DeviceArray sq = DeviceArray::of(q), sk = DeviceArray::of(k);
        if (norm) {
          gpu()->rmsnorm(dev(sq, dt, {T * sh.q_heads, D}), dev(dqw, DType::kF32, {D}), 1e-6f,
                         dev(sq, dt, {T * sh.q_heads, D}));
          gpu()->rmsnorm(dev(sk, dt, {T * sh.kv_heads, D}), dev(dkw, DType::kF32, {D}), 1e-6f,
                         dev(sk, dt, {T * sh.kv_heads, D}));
        }
        gpu()->rope(dev(sq, dt, {T, sh.q_heads, D}), dev(dc, DType::kF32, {T, half}),
                    dev(ds, DType::kF32, {T, half}), sh.rotary);
        gpu()->rope(dev(sk, dt, {T, sh.kv_heads, D}), dev(dc, DType::kF32, {T, half}),
                    dev(ds, DType::kF32, {T, half}), sh.rotary);
        ASSERT_TRUE(gpu()->take_error().ok());
        const std::string what = std::string(dtype_label(dt)) + " head_dim " + std::to_string(D) +
                                 " rotary " + std::to_string(sh.rotary) + " norm " +
                                 std::to_string(norm);
        EXPECT_EQ(fv.download(), v.bytes) << what;
        // The vector kernel's norm sums a power-of-two group of lanes by the same shuffle tree as
        // rmsnorm's warp (whose extra lanes add exact zeros): the same bits. Its 12- and 24-lane
        // groups and the warp-per-head kernel sum in another order: within rounding.
        const int64_t vec = 16 / static_cast<int64_t>(dtype_size(dt)), lanes = D / vec;
        const bool same_sums =
            D % vec == 0 && half % vec == 0 && lanes <= 32 && (lanes & (lanes - 1)) == 0;
        if (norm && !same_sums) {
          EXPECT_TRUE(close_to(fq.download_floats(dt, T * qn), sq.download_floats(dt, T * qn),
                               rel_tol(dt) / 2, rel_tol(dt))) << what;
          EXPECT_TRUE(close_to(fk.download_floats(dt, T * kn), sk.download_floats(dt, T * kn),
                               rel_tol(dt) / 2, rel_tol(dt))) << what;
        } else {
          EXPECT_EQ(fq.download(), sq.download()) << what;
          EXPECT_EQ(fk.download(), sk.download()) << what;
        }
      }
    }
  }
}

TEST(CudaElementwise, SiluMulAddConvertMatchCpu) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(14);
  for (DType dt : kDtypes) {
    for (auto [tokens, inter] : {std::pair<int64_t, int64_t>{1, 14336}, {7, 160}, {33, 75}}) {
      HostArray gu = random_array(rng, tokens * 2 * inter, dt, -6, 6);
      DeviceArray dgu = DeviceArray::of(gu);
      DeviceArray dout(dtype_nbytes(dt, tokens * inter));
      dout.poison(dt, tokens * inter);
      gpu()->silu_mul(dev(dgu, dt, {tokens, 2 * inter}), dev(dout, dt, {tokens, inter}));
      std::vector<float> in = gu.values, ref(static_cast<size_t>(tokens * inter));
      cpu().silu_mul(host(in, {tokens, 2 * inter}), host(ref, {tokens, inter}));
      EXPECT_TRUE(
          close_to(dout.download_floats(dt, tokens * inter), ref, rel_tol(dt) / 2, rel_tol(dt)))
          << "silu_mul " << dtype_label(dt) << " inter " << inter;
    }
    for (int64_t n : {int64_t{8}, int64_t{4096 * 3}, int64_t{1001}}) {
      HostArray x = random_array(rng, n, dt, -5, 5), y = random_array(rng, n, dt, -5, 5);
      DeviceArray dx = DeviceArray::of(x), dy = DeviceArray::of(y);
      gpu()->add_inplace(dev(dx, dt, {n}), dev(dy, dt, {n}));
      HostArray want(n, dt);
      for (int64_t i = 0; i < n; ++i)
        want.set(i, x.values[static_cast<size_t>(i)] + y.values[static_cast<size_t>(i)]);
      EXPECT_EQ(dx.download(), want.bytes) << "add " << dtype_label(dt) << " n " << n;

      for (DType to : kDtypes) {  // convert: exact widening, RNE narrowing as core/dtype
        DeviceArray dst(dtype_nbytes(to, n));
        dst.poison(to, n);
        gpu()->convert(dev(dy, dt, {n}), dev(dst, to, {n}));
        HostArray conv(n, to);
        for (int64_t i = 0; i < n; ++i) conv.set(i, y.values[static_cast<size_t>(i)]);
        EXPECT_EQ(dst.download(), conv.bytes)
            << "convert " << dtype_label(dt) << " -> " << dtype_label(to);
      }
    }
  }
}

TEST(CudaElementwise, EmbeddingAndGatherRows) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(15);
  const int64_t vocab = 50, hidden = 136;
  for (DType table_dt : kDtypes) {
    HostArray table = random_array(rng, vocab * hidden, table_dt, -1, 1);
    std::vector<int32_t> ids = {3, 0, 49, 17, 50, -1, 3};  // 50 and -1 are out of range
    const int64_t t = static_cast<int64_t>(ids.size());
    DeviceArray dt_ = DeviceArray::of(table), dids = DeviceArray::of(ids);
    DeviceArray dout(dtype_nbytes(DType::kBF16, t * hidden));
    dout.poison(DType::kBF16, t * hidden);
    gpu()->embedding(dev(dids, DType::kI32, {t}), dev(dt_, table_dt, {vocab, hidden}),
                     dev(dout, DType::kBF16, {t, hidden}));
    HostArray want(t * hidden, DType::kBF16);
    for (int64_t r = 0; r < t; ++r) {
      const int32_t id = ids[static_cast<size_t>(r)];
      for (int64_t c = 0; c < hidden; ++c) {
        want.set(r * hidden + c,
                 id >= 0 && id < vocab ? table.values[static_cast<size_t>(id * hidden + c)] : 0.0f);
      }
    }
    EXPECT_EQ(dout.download(), want.bytes) << "embedding from " << dtype_label(table_dt);
    // A vocabulary slice: the table's rows are ids [40, 40 + vocab); others give zero rows.
    std::vector<int32_t> slice_ids = {40, 89, 39, 90, 57, 3};
    const int64_t ts = static_cast<int64_t>(slice_ids.size());
    DeviceArray dsids = DeviceArray::of(slice_ids);
    DeviceArray dsout(dtype_nbytes(DType::kBF16, ts * hidden));
    dsout.poison(DType::kBF16, ts * hidden);
    gpu()->embedding_slice(dev(dsids, DType::kI32, {ts}), dev(dt_, table_dt, {vocab, hidden}), 40,
                           dev(dsout, DType::kBF16, {ts, hidden}));
    HostArray swant(ts * hidden, DType::kBF16);
    for (int64_t r = 0; r < ts; ++r) {
      const int64_t row = slice_ids[static_cast<size_t>(r)] - 40;
      for (int64_t c = 0; c < hidden; ++c) {
        swant.set(r * hidden + c, row >= 0 && row < vocab
                                      ? table.values[static_cast<size_t>(row * hidden + c)]
                                      : 0.0f);
      }
    }
    EXPECT_EQ(dsout.download(), swant.bytes) << "embedding_slice from " << dtype_label(table_dt);
  }
  // gather_rows: raw bytes, 16-byte and odd row sizes, an out-of-range row gives zeros.
  for (int64_t row_elems : {int64_t{64}, int64_t{13}}) {
    HostArray x = random_array(rng, 9 * row_elems, DType::kBF16);
    std::vector<int32_t> rows = {8, 0, 3, 9, 3};
    DeviceArray dx = DeviceArray::of(x), drows = DeviceArray::of(rows);
    DeviceArray dout(dtype_nbytes(DType::kBF16, 5 * row_elems));
    dout.poison(DType::kBF16, 5 * row_elems);
    gpu()->gather_rows(dev(dx, DType::kBF16, {9, row_elems}), dev(drows, DType::kI32, {5}),
                       dev(dout, DType::kBF16, {5, row_elems}));
    std::vector<uint8_t> want(static_cast<size_t>(dtype_nbytes(DType::kBF16, 5 * row_elems)), 0);
    const size_t rb = static_cast<size_t>(row_elems) * 2;
    for (size_t r = 0; r < rows.size(); ++r) {
      if (rows[r] < 9) std::memcpy(want.data() + r * rb, x.bytes.data() + rows[r] * rb, rb);
    }
    EXPECT_EQ(dout.download(), want) << "gather_rows, row of " << row_elems;
  }
}

// The MLP gate fused into the decode GEMV equals linear then silu_mul bit for bit (same sums,
// same roundings); larger m takes the unfused path and must equal it too.
TEST(CudaElementwise, LinearSiluMulMatchesLinearThenSiluMul) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(18);
  struct Shape {
    int64_t m, inter, k;
  };
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (Shape s : {Shape{1, 1, 8}, Shape{1, 1408, 512}, Shape{2, 37, 1032}, Shape{3, 300, 4096},
                    Shape{4, 129, 264}, Shape{6, 64, 128}}) {
      for (bool bias : {false, true}) {
        const int64_t n = 2 * s.inter;
        HostArray x = random_array(rng, s.m * s.k, dt, -1, 1);
        HostArray w = random_array(rng, n * s.k, dt, -0.2f, 0.2f);
        std::vector<float> b(static_cast<size_t>(n));
        std::uniform_real_distribution<float> bd(-1.0f, 1.0f);
        for (auto& v : b) v = bd(rng);
        DeviceArray dx = DeviceArray::of(x), dw = DeviceArray::of(w), db = DeviceArray::of(b);
        DeviceArray scratch(dtype_nbytes(dt, s.m * n)), fused(dtype_nbytes(dt, s.m * s.inter)),
            ref(dtype_nbytes(dt, s.m * s.inter));
        fused.poison(dt, s.m * s.inter);
        LinearWeight lw;
        lw.w = dev(dw, dt, {n, s.k});
        if (bias) lw.bias = dev(db, DType::kF32, {n});
        gpu()->linear_silu_mul(dev(dx, dt, {s.m, s.k}), lw, dev(scratch, dt, {s.m, n}),
                               dev(fused, dt, {s.m, s.inter}));
        gpu()->linear(dev(dx, dt, {s.m, s.k}), lw, dev(scratch, dt, {s.m, n}));
        gpu()->silu_mul(dev(scratch, dt, {s.m, n}), dev(ref, dt, {s.m, s.inter}));
        EXPECT_EQ(fused.download(), ref.download())
            << dtype_label(dt) << " m " << s.m << " inter " << s.inter << " k " << s.k << " bias "
            << bias;
      }
    }
  }
  EXPECT_TRUE(gpu()->take_error().ok());
}

TEST(CudaElementwise, LinearMatchesDoubleReference) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(16);
  struct Shape {
    int64_t m, n, k;
  };
  for (DType dt : {DType::kBF16, DType::kF16}) {
    // m <= 4 runs the gemv kernel: odd n (a warp's second row missing), k not a multiple of
    // the 256 elements a warp reads per pass nor of the unrolled 1024, long k.
    for (Shape s : {Shape{1, 64, 64}, Shape{5, 96, 128}, Shape{37, 256, 320}, Shape{128, 512, 512},
                    Shape{3, 1000, 4096}, Shape{300, 200, 100}, Shape{1, 1, 8}, Shape{2, 7, 200},
                    Shape{4, 33, 1032}, Shape{1, 4097, 1288}, Shape{3, 130, 14336},
                    Shape{2, 2048, 4104}}) {
      for (bool bias : {false, true}) {
        HostArray x = random_array(rng, s.m * s.k, dt, -1, 1);
        HostArray w = random_array(rng, s.n * s.k, dt, -0.1f, 0.1f);
        std::vector<float> b(static_cast<size_t>(s.n));
        std::uniform_real_distribution<float> bd(-1.0f, 1.0f);
        for (auto& v : b) v = bd(rng);
        DeviceArray dx = DeviceArray::of(x), dw = DeviceArray::of(w), db = DeviceArray::of(b);
        DeviceArray dout(dtype_nbytes(dt, s.m * s.n));
        dout.poison(dt, s.m * s.n);
        LinearWeight lw;
        lw.w = dev(dw, dt, {s.n, s.k});
        if (bias) lw.bias = dev(db, DType::kF32, {s.n});
        gpu()->linear(dev(dx, dt, {s.m, s.k}), lw, dev(dout, dt, {s.m, s.n}));
        std::vector<double> ref(static_cast<size_t>(s.m * s.n));
        for (int64_t i = 0; i < s.m; ++i) {
          for (int64_t j = 0; j < s.n; ++j) {
            double acc = bias ? b[static_cast<size_t>(j)] : 0.0;
            for (int64_t k = 0; k < s.k; ++k) {
              acc += static_cast<double>(x.values[static_cast<size_t>(i * s.k + k)]) *
                     w.values[static_cast<size_t>(j * s.k + k)];
            }
            ref[static_cast<size_t>(i * s.n + j)] = acc;
          }
        }
        EXPECT_TRUE(
            close_to(dout.download_floats(dt, s.m * s.n), ref, rel_tol(dt) / 2, rel_tol(dt)))
            << dtype_label(dt) << " m " << s.m << " n " << s.n << " k " << s.k << " bias " << bias;
      }
    }
  }
  EXPECT_TRUE(gpu()->take_error().ok());
}

}  // namespace
}  // namespace ls::cuda_test
