#pragma once
// Instruction-set variants of the CPU kernels. Every vectorised kernel is one template written
// against kernels/cpu/simd.h and instantiated for each ISA the compiler targets, so the portable
// scalar variant runs the same algorithm and is tested on every machine. The overloads without
// an Isa argument use best_isa().

#include <string_view>
#include <vector>

namespace ls::kernels::cpu {

enum class Isa {
  kScalar,  // portable C++ (one lane)
  kAvx2,    // AVX2 + FMA + F16C (8 lanes)
  kAvx512,  // AVX-512F/BW/VL (16 lanes)
};

// The widest ISA this build was compiled for (-march decides; the build uses -march=native).
Isa best_isa();
// Every ISA compiled into this build, scalar first.
std::vector<Isa> available_isas();
bool isa_available(Isa isa);
std::string_view isa_name(Isa isa);

}  // namespace ls::kernels::cpu
