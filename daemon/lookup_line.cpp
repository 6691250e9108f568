#include "daemon/lookup_line.hpp"

namespace ktune::daemon {

namespace {

// One member of a flat JSON object: `raw` is the value's text (a string without its quotes).
struct FlatField {
  std::string_view key;
  std::string_view raw;
  bool is_string = false;
};
constexpr int k_max_flat_fields = 12;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Reads a flat JSON object field by field; every read returns false on anything else.
class FlatScanner {
public:
  explicit FlatScanner(std::string_view text) : m_text(text) {}

  // The member count, or -1 when `text` is not such an object.
  int scan(FlatField* fields, int max_fields) {
    skip();
    if (!eat('{')) return -1;
    skip();
    int count = 0;
    if (!eat('}')) {
      while (true) {
        if (count == max_fields || !member(fields[count++])) return -1;
        skip();
        if (eat(',')) continue;
        if (eat('}')) break;
        return -1;
      }
    }
    skip();
    return m_i == m_text.size() ? count : -1;
  }

private:
  void skip() {
    while (m_i < m_text.size() && is_space(m_text[m_i])) ++m_i;
  }
  bool eat(char c) {
    if (m_i >= m_text.size() || m_text[m_i] != c) return false;
    ++m_i;
    return true;
  }
  bool string(std::string_view& out) {
    if (!eat('"')) return false;
    const std::size_t begin = m_i;
    while (m_i < m_text.size() && m_text[m_i] != '"') {
      const auto c = static_cast<unsigned char>(m_text[m_i]);
      if (c == '\\' || c < 0x20 || c > 0x7e) return false;
      ++m_i;
    }
    if (m_i >= m_text.size()) return false;
    out = m_text.substr(begin, m_i - begin);
    ++m_i;
    return true;
  }
  // An integer (no leading zeros) or true, false, null.
  bool scalar(std::string_view& out) {
    const std::size_t begin = m_i;
    if (m_i < m_text.size() && m_text[m_i] == '-') ++m_i;
    const std::size_t digits = m_i;
    while (m_i < m_text.size() && m_text[m_i] >= '0' && m_text[m_i] <= '9') ++m_i;
    if (m_i == digits) {
      while (m_i < m_text.size() && m_text[m_i] >= 'a' && m_text[m_i] <= 'z') ++m_i;
      const auto word = m_text.substr(begin, m_i - begin);
      if (word != "true" && word != "false" && word != "null") return false;
    } else if (m_i - digits > 1 && m_text[digits] == '0') {
      return false;
    }
    out = m_text.substr(begin, m_i - begin);
    return true;
  }
  bool member(FlatField& field) {
    skip();
    if (!string(field.key)) return false;
    skip();
    if (!eat(':')) return false;
    skip();
    field.is_string = m_i < m_text.size() && m_text[m_i] == '"';
    return field.is_string ? string(field.raw) : scalar(field.raw);
  }

  std::string_view m_text;
  std::size_t m_i = 0;
};

// Takes one member into `out`; false when it is not one a plain lookup has.
bool take(const FlatField& field, LookupLine& out, std::string_view& op, bool& has_kernel,
          bool& has_shape) {
  if (field.key == "v") return !field.is_string && field.raw == "1";
  if (field.key == "id") {
    if (field.raw == "true" || field.raw == "false") return false;
    out.id = field.is_string ? std::string_view(field.raw.data() - 1, field.raw.size() + 2)
                             : field.raw;
    return true;
  }
  if (field.key == "tune_on_miss") {
    if (field.is_string || (field.raw != "true" && field.raw != "false")) return false;
    out.tune_on_miss = field.raw == "true";
    return true;
  }
  if (!field.is_string) return false;
  if (field.key == "op") {
    op = field.raw;
  } else if (field.key == "kernel") {
    out.kernel = field.raw;
    has_kernel = true;
  } else if (field.key == "shape") {
    out.shape = field.raw;
    has_shape = true;
  } else if (field.key == "dtype") {
    out.dtype = field.raw;
  } else if (field.key == "device") {
    out.device = field.raw;
  } else {
    return false;
  }
  return true;
}

} // namespace

std::optional<LookupLine> read_lookup_line(std::string_view line) {
  FlatField fields[k_max_flat_fields];
  const int count = FlatScanner(line).scan(fields, k_max_flat_fields);
  if (count < 0) return std::nullopt;
  LookupLine out;
  std::string_view op;
  bool has_kernel = false, has_shape = false;
  for (int f = 0; f < count; ++f) {
    if (!take(fields[f], out, op, has_kernel, has_shape)) return std::nullopt;
  }
  if (op != "lookup" || !has_kernel || !has_shape) return std::nullopt;
  return out;
}

} // namespace ktune::daemon
