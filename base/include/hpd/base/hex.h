// Hex text of bytes and back: the one hex-digit table of hpd.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hpd {

enum class HexCase { kLower, kUpper };

// The hex digit of the low four bits of `nibble`.
inline char hex_digit(unsigned nibble, HexCase letters = HexCase::kLower) {
  static constexpr char kLower[] = "0123456789abcdef";
  static constexpr char kUpper[] = "0123456789ABCDEF";
  return (letters == HexCase::kLower ? kLower : kUpper)[nibble & 0xF];
}

// Appends the two hex digits of `byte`, high nibble first.
inline void append_hex_byte(std::string& out, uint8_t byte, HexCase letters = HexCase::kLower) {
  out.push_back(hex_digit(byte >> 4, letters));
  out.push_back(hex_digit(byte, letters));
}

// Two hex digits per byte, in order (build-ids, tokens).
std::string to_hex(std::span<const uint8_t> bytes, HexCase letters = HexCase::kLower);

// The value of one hex digit (either case), or -1 for any other character.
int hex_value(char c);

// Whether `s` is non-empty and only lower-case hex digits (how hpd writes build-ids).
bool is_lower_hex(std::string_view s);

// The bytes of an even-length hex string (either case); nullopt for an odd length or a non-digit.
std::optional<std::vector<uint8_t>> from_hex(std::string_view hex);

}  // namespace hpd
