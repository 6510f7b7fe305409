/// @file
/// @brief json_quoted(): text as a JSON string, for the few records the harness
/// writes by hand (test progress, benchmark rows, timelines).
///
/// The harness writes flat JSON objects line by line and needs no parser, so it
/// has no JSON library: this one function is what every writer shares. It
/// escapes what RFC 8259 requires (the quote, the backslash and the control
/// characters below 0x20) and passes every other byte through, so UTF-8 text
/// stays as it was.
#pragma once

#include <string>
#include <string_view>

namespace dtl {

/// @brief `text` as a JSON string value, quotes included.
/// @param[in] text any bytes; UTF-8 passes through unchanged.
/// @return `"..."` with `"`, `\` and control characters escaped (`\n`, `\t`, else `\u00XX`).
std::string json_quoted(std::string_view text);

}  // namespace dtl
