/// @file
/// @brief dtl::Rng — the one random number generator of dtlabs (data sets, weight
/// initialisation, test inputs), specified bit for bit so that every machine
/// makes the same data and the same initial models.
///
/// Why not `std::normal_distribution`? The C++ standard fixes the engines
/// (`std::mt19937_64` gives the same integers everywhere) but not the
/// distributions: libstdc++, libc++ and MSVC turn the same integers into
/// different floats. A data set that differs between a student's laptop and the
/// grading machine makes "same loss at step 100" impossible to check, so every
/// transform here is written out:
///
///   - the engine is xoshiro256** (Blackman and Vigna, 2018): 256 bits of state,
///     period 2^256 - 1, fast, and passes BigCrush;
///   - the state is filled from the 64-bit seed with splitmix64, the seeding
///     procedure its authors recommend (a seed of 0 is fine);
///   - uniform() takes the top 53 bits: exactly representable doubles in [0, 1);
///   - below(n) rejects the few values that would make `% n` biased;
///   - normal() is Box–Muller on two uniforms.
///
/// The integer stream and uniform() are bit-identical on every machine. normal()
/// calls std::log, std::sqrt and std::cos; IEEE 754 makes sqrt exact, and the
/// data sets compute in double and round to float at the end, so a last-bit
/// difference between two C libraries' log or cos would have to straddle a float
/// rounding boundary (odds about 2^-29 per value) to show in the data.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace dtl {

/// @brief One step of splitmix64 (Steele, Lea and Flood, 2014).
///
/// Adds the golden-ratio increment to `state` and returns a strong mix of it:
/// consecutive seeds give unrelated outputs, which is what seeding needs.
/// @param[in,out] state the generator's state, advanced by one step.
/// @return the next 64-bit output.
inline uint64_t splitmix64(uint64_t& state) {
  state += 0x9e3779b97f4a7c15ULL;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// @brief xoshiro256** seeded by splitmix64, with portable uniform and normal draws.
///
/// Cheap to copy (32 bytes). Two generators with the same seed give the same
/// stream on every platform and compiler.
class Rng {
 public:
  /// @brief Seeds the 256-bit state with four splitmix64 outputs of `seed`.
  /// @param[in] seed any 64-bit value, 0 included.
  explicit Rng(uint64_t seed) {
    uint64_t sm = seed;
    for (uint64_t& word : s_) word = splitmix64(sm);
  }

  /// @brief The next raw output of xoshiro256**.
  /// @return 64 uniformly distributed bits.
  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  /// @brief A uniform double in [0, 1): the top 53 bits of next_u64() times 2^-53.
  /// @return a multiple of 2^-53 in [0, 1); every such value is equally likely.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  /// @brief A uniform integer in [0, n), without modulo bias.
  ///
  /// `x % n` over 2^64 values favours the small results when n does not
  /// divide 2^64; rejecting the first 2^64 mod n values removes the surplus
  /// (at most one draw in two is rejected, usually none).
  /// @param[in] n the number of outcomes, at least 1.
  /// @return a value in [0, n); 0 when n is 0 or 1 (no draw is made for n == 0).
  uint64_t below(uint64_t n) {
    if (n == 0) return 0;
    const uint64_t threshold = (0 - n) % n;  // == 2^64 mod n
    for (;;) {
      const uint64_t x = next_u64();
      if (x >= threshold) return x % n;
    }
  }

  /// @brief A standard normal draw (mean 0, standard deviation 1), by Box–Muller.
  ///
  /// Uses two uniforms per call and keeps no spare value, so the stream
  /// position after k calls is always 2k draws (simple to reason about).
  /// @return a double from N(0, 1).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log(u1) is finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

  /// @brief A normal draw with the given mean and standard deviation: mean + stddev * normal().
  /// @param[in] mean the mean.
  /// @param[in] stddev the standard deviation.
  /// @return a double from N(mean, stddev^2).
  double normal(double mean, double stddev) { return mean + stddev * normal(); }

  /// @brief A uniform double in [low, high).
  /// @param[in] low the lower end (included).
  /// @param[in] high the upper end (excluded).
  /// @return low + (high - low) * uniform().
  double uniform(double low, double high) { return low + (high - low) * uniform(); }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace dtl
