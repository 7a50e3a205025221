#include "data/unicode_text.h"

namespace hlm {

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const size_t n = bytes.size();
  size_t i = 0;
  const auto at = [&](size_t k) { return static_cast<unsigned char>(bytes[k]); };
  while (i < n) {
    const unsigned char lead = at(i);
    if (lead < 0x80) {
      out += static_cast<char>(lead);
      ++i;
      continue;
    }
    // Allowed range of the second byte per lead byte (Unicode Table 3-7); other continuation bytes are 80..BF.
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      need = 1;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      need = 2;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      need = 3;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    }
    if (need == 0) {  // not a lead byte at all
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool ok = true;
    for (size_t k = 0; k < need; ++k, ++j) {
      const unsigned char lo_k = k == 0 ? lo : 0x80, hi_k = k == 0 ? hi : 0xBF;
      if (j >= n || at(j) < lo_k || at(j) > hi_k) {
        ok = false;
        break;
      }
    }
    if (ok) {
      out.append(bytes.substr(i, j - i));
    } else {
      out += "\xEF\xBF\xBD";  // the lead byte and the valid continuation bytes before the failure form one subpart
    }
    i = j;
  }
  return out;
}

}  // namespace hlm
