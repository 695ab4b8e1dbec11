// Small string helpers shared by the config loader, the IR parser and the CLI.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln {

std::vector<std::string> split(std::string_view text, char sep);
std::string_view trim(std::string_view text);
bool starts_with(std::string_view text, std::string_view prefix);

// Levenshtein distance, for "did you mean" suggestions.
int edit_distance(std::string_view a, std::string_view b);
// The candidate closest to `word` if it is close enough to be a plausible typo, else "".
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace kiln
