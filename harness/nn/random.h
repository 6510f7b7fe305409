/// @file
/// @brief A portable random number generator: the same seed gives the same numbers everywhere.
///
/// What this file teaches: `std::normal_distribution` and friends are allowed
/// to differ between standard libraries, so a model initialised with them
/// could differ between two machines — and data-parallel ranks must start
/// from identical weights. Here everything is spelled out: splitmix64 turns a
/// seed into a state, xoshiro256** generates 64-bit integers, the top 53 bits
/// make a double in [0, 1), and Box-Muller turns two uniforms into a normal.
#pragma once

#include <cstdint>

namespace dtl::nn {

/// @brief splitmix64: one step of a 64-bit mixing generator (used for seeding).
/// @param[in,out] state advanced by one step.
/// @return the next 64-bit value.
constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// @brief xoshiro256** seeded through splitmix64, with uniform and normal draws.
class Rng {
 public:
  /// @brief A generator whose whole sequence is a function of `seed`.
  /// @param[in] seed any value (0 is fine).
  explicit Rng(std::uint64_t seed) noexcept {
    std::uint64_t s = seed;
    for (std::uint64_t& word : state_) word = splitmix64(s);
  }
  /// @brief The next 64 random bits (xoshiro256**).
  /// @return a uniformly distributed 64-bit integer.
  std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  /// @brief A uniform double in [0, 1) with 53 random bits.
  /// @return the draw.
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// @brief A uniform double in [low, high).
  /// @param[in] low the lower bound.
  /// @param[in] high the upper bound.
  /// @return the draw.
  double uniform(double low, double high) noexcept { return low + (high - low) * uniform(); }
  /// @brief A normal draw (Box-Muller; each call uses two uniforms, no cached second value).
  /// @param[in] mean the mean.
  /// @param[in] stddev the standard deviation.
  /// @return the draw.
  double normal(double mean, double stddev) noexcept;
  /// @brief A uniform integer in [0, n) (modulo; the bias, below n / 2^64, is negligible here).
  /// @param[in] n the bound, > 0.
  /// @return the draw (0 when n is 0).
  std::uint64_t below(std::uint64_t n) noexcept { return n == 0 ? 0 : next() % n; }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept {
    return (x << k) | (x >> (64 - k));
  }
  std::uint64_t state_[4];
};

}  // namespace dtl::nn
