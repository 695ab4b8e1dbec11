// SHA-256, through OpenSSL's libcrypto: for checking downloaded data
// (tokenizer files) against the digests their publishers give.
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);

}  // namespace kiln
