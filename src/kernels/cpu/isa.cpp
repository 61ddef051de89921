#include "kernels/cpu/isa.h"

#include "kernels/cpu/simd.h"

namespace ls::kernels::cpu {

Isa best_isa() {
#if defined(LS_KERNELS_HAVE_AVX512)
  return Isa::kAvx512;
#elif defined(LS_KERNELS_HAVE_AVX2)
  return Isa::kAvx2;
#else
  return Isa::kScalar;
#endif
}

std::vector<Isa> available_isas() {
  std::vector<Isa> isas{Isa::kScalar};
#if defined(LS_KERNELS_HAVE_AVX2)
  isas.push_back(Isa::kAvx2);
#endif
#if defined(LS_KERNELS_HAVE_AVX512)
  isas.push_back(Isa::kAvx512);
#endif
  return isas;
}

bool isa_available(Isa isa) {
  for (Isa a : available_isas()) {
    if (a == isa) return true;
  }
  return false;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

}  // namespace ls::kernels::cpu
