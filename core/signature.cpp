#include "core/signature.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

namespace ktune {
namespace {

struct Token {
  std::string text;
  bool word = false;   // identifier (std::size_t counts as one)
};

bool word_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

// Comments become spaces (newlines kept, so offsets and line numbers still hold).
std::string without_comments(std::string_view text) {
  std::string out(text);
  for (std::size_t i = 0; i + 1 < out.size(); ++i) {
    if (out[i] == '/' && out[i + 1] == '/') {
      while (i < out.size() && out[i] != '\n') out[i++] = ' ';
    } else if (out[i] == '/' && out[i + 1] == '*') {
      out[i] = out[i + 1] = ' ';
      for (i += 2; i < out.size() && !(out[i] == '*' && i + 1 < out.size() && out[i + 1] == '/'); ++i) {
        if (out[i] != '\n') out[i] = ' ';
      }
      if (i + 1 < out.size()) out[i] = out[i + 1] = ' ';
    }
  }
  return out;
}

std::vector<Token> tokenize(std::string_view text) {
  std::vector<Token> tokens;
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      ++i;
    } else if (word_start(c) || (c == ':' && i + 2 < text.size() && text[i + 1] == ':')) {
      std::size_t end = i;
      while (end < text.size()) {
        if (word_char(text[end])) ++end;
        else if (text[end] == ':' && end + 1 < text.size() && text[end + 1] == ':') end += 2;
        else break;
      }
      tokens.push_back({std::string(text.substr(i, end - i)), true});
      i = end;
    } else if (c == '"') {
      const std::size_t end = text.find('"', i + 1);
      const std::size_t stop = end == std::string_view::npos ? text.size() : end + 1;
      tokens.push_back({std::string(text.substr(i, stop - i)), false});
      i = stop;
    } else {
      tokens.push_back({std::string(1, c), false});
      ++i;
    }
  }
  return tokens;
}

bool is_qualifier(std::string_view w) {
  return w == "const" || w == "volatile" || w == "restrict" || w == "__restrict" ||
         w == "__restrict__";
}

bool is_builtin_type_word(std::string_view w) {
  return w == "int" || w == "long" || w == "short" || w == "char" || w == "unsigned" ||
         w == "signed" || w == "float" || w == "double";
}

bool is_specifier(std::string_view w) {
  return w == "extern" || w == "static" || w == "inline" || w == "__global__" ||
         w == "__device__" || w == "__host__" || w == "__forceinline__" || w == "__noinline__";
}

std::string strip_std(std::string_view type) {
  if (type.rfind("std::", 0) == 0) type.remove_prefix(5);
  if (type.rfind("::", 0) == 0) type.remove_prefix(2);
  return std::string(type);
}

Result<SignatureParam> parse_param(const std::vector<Token>& tokens, std::size_t index) {
  const std::string where = "parameter " + std::to_string(index + 1);
  SignatureParam param;
  std::vector<std::string> words;
  int stars = 0;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const Token& t = tokens[i];
    if (t.word) {
      if (t.text == "const" && stars == 0) param.const_data = true;
      if (!is_qualifier(t.text)) words.push_back(t.text);
    } else if (t.text == "*") {
      ++stars;
    } else if (t.text == "[") {
      ++stars;  // float A[] is float* A
      while (i < tokens.size() && tokens[i].text != "]") ++i;
    } else if (t.text == "&") {
      return make_error(ErrorCode::spec_error, where + ": references are not supported (expected T* or T)");
    } else {
      return make_error(ErrorCode::spec_error, where + ": unexpected '" + t.text + "'");
    }
  }
  if (words.empty()) return make_error(ErrorCode::spec_error, where + ": expected a type, found nothing");
  if (words.size() >= 2 && !is_builtin_type_word(words.back())) {
    param.name = words.back();
    words.pop_back();
  }
  for (const auto& w : words) param.c_type += (param.c_type.empty() ? "" : " ") + w;
  if (stars > 1) {
    return make_error(ErrorCode::spec_error, where + " '" + param.written() +
                                        "': expected a buffer (T*) or a scalar (T), found " +
                                        std::to_string(stars) + " levels of pointer");
  }
  param.pointer = stars == 1;
  const auto dtype = dtype_of_c_type(param.c_type);
  if (!dtype) {
    return make_error(ErrorCode::spec_error,
                      where + " '" + param.written() + "': type '" + param.c_type +
                          "' has no ktune dtype (expected float, double, int, int32_t, int64_t, "
                          "long, size_t, __half or KTUNE_DTYPE)");
  }
  param.dtype = *dtype;
  return param;
}

// The signature in tokens[first, last), `name` at tokens[name_at], '(' right after it.
Result<Signature> parse_tokens(const std::vector<Token>& tokens, std::size_t name_at) {
  Signature sig;
  sig.name = tokens[name_at].text;
  bool returns_void = false;
  for (std::size_t i = 0; i < name_at; ++i) {
    const Token& t = tokens[i];
    if (t.word && t.text == "void") {
      returns_void = true;
    } else if (t.word && (t.text == "__launch_bounds__" || t.text == "__attribute__")) {
      int depth = 0;  // skip its parenthesised arguments
      for (++i; i < name_at; ++i) {
        if (tokens[i].text == "(") ++depth;
        if (tokens[i].text == ")" && --depth == 0) break;
      }
    } else if (!(t.word && is_specifier(t.text)) && !(t.text.size() > 1 && t.text.front() == '"')) {
      return make_error(ErrorCode::spec_error, "'" + sig.name + "': expected a function returning void "
                                      "(void " + sig.name + "(...)), found '" + t.text +
                                      "' before its name");
    }
  }
  if (!returns_void) {
    return make_error(ErrorCode::spec_error, "'" + sig.name + "': expected a function returning void (void " +
                                        sig.name + "(...))");
  }
  std::vector<std::vector<Token>> params(1);
  int depth = 0;
  std::size_t i = name_at + 2;
  for (; i < tokens.size(); ++i) {
    const Token& t = tokens[i];
    if (t.text == "(") ++depth;
    if (t.text == ")" && depth-- == 0) break;
    if (t.text == "," && depth == 0) params.emplace_back();
    else params.back().push_back(t);
  }
  if (i == tokens.size()) {
    return make_error(ErrorCode::spec_error, "'" + sig.name + "': the parameter list does not close");
  }
  const bool no_params = params.size() == 1 &&
                         (params[0].empty() || (params[0].size() == 1 && params[0][0].text == "void"));
  if (no_params) return sig;
  for (std::size_t p = 0; p < params.size(); ++p) {
    auto param = parse_param(params[p], p);
    if (!param) return make_error(ErrorCode::spec_error, "'" + sig.name + "': " + param.error().message);
    sig.params.push_back(std::move(param).value());
  }
  return sig;
}

} // namespace

std::string SignatureParam::written() const {
  std::string out = (const_data ? "const " : "") + c_type + (pointer ? "*" : "");
  if (!name.empty()) out += " " + name;
  return out;
}

std::optional<std::string> dtype_of_c_type(std::string_view c_type) {
  static const std::array<std::pair<std::string_view, std::string_view>, 27> k_types{{
      {"float", "f32"},        {"double", "f64"},
      {"int", "i32"},          {"signed", "i32"},         {"signed int", "i32"},
      {"int32_t", "i32"},      {"unsigned", "i32"},       {"unsigned int", "i32"},
      {"uint32_t", "i32"},     {"long", "i64"},           {"long int", "i64"},
      {"long long", "i64"},    {"long long int", "i64"},  {"int64_t", "i64"},
      {"ptrdiff_t", "i64"},    {"size_t", "i64"},         {"uint64_t", "i64"},
      {"unsigned long", "i64"}, {"unsigned long long", "i64"}, {"ssize_t", "i64"},
      {"__half", "f16"},       {"half", "f16"},           {"KTUNE_DTYPE", ""},
      {"int64", "i64"},        {"long unsigned int", "i64"}, {"unsigned long int", "i64"},
      {"signed long", "i64"},
  }};
  const std::string type = strip_std(c_type);
  for (const auto& [name, dtype] : k_types) {
    if (name == type) return std::string(dtype);
  }
  return std::nullopt;
}

Result<Signature> parse_signature(std::string_view text) {
  const std::vector<Token> tokens = tokenize(without_comments(text));
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
    if (tokens[i].word && tokens[i + 1].text == "(" && tokens[i].text != "__launch_bounds__" &&
        tokens[i].text != "__attribute__") {
      return parse_tokens(tokens, i);
    }
  }
  return make_error(ErrorCode::spec_error, "expected a declaration such as \"void f(const float* A, int n)\", "
                                  "found '" + std::string(text) + "'");
}

Result<Signature> find_signature(std::string_view source, std::string_view name) {
  const std::string text = without_comments(source);
  std::optional<Error> first_error;
  for (std::size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
    const std::size_t end = at + name.size();
    if ((at > 0 && word_char(text[at - 1])) || (end < text.size() && word_char(text[end]))) continue;
    std::size_t open = end;
    while (open < text.size() && std::isspace(static_cast<unsigned char>(text[open])) != 0) ++open;
    if (open >= text.size() || text[open] != '(') continue;
    // The statement it starts: back to the previous ';', '{' or '}', preprocessor lines dropped.
    std::size_t start = text.find_last_of(";{}", at);
    start = start == std::string::npos ? 0 : start + 1;
    std::string head;
    for (std::size_t line = start; line < at;) {
      std::size_t next = text.find('\n', line);
      if (next == std::string::npos || next > at) next = at;
      std::string_view piece(text.data() + line, next - line);
      const auto first = piece.find_first_not_of(" \t\r\n");
      if (first == std::string_view::npos || piece[first] != '#') head += std::string(piece) + " ";
      line = next == at ? at : next + 1;
    }
    const std::vector<Token> head_tokens = tokenize(head);
    const bool declares = std::any_of(head_tokens.begin(), head_tokens.end(),
                                      [](const Token& t) { return t.word && t.text == "void"; });
    if (!declares) continue;
    int depth = 0;
    std::size_t close = open;
    for (; close < text.size(); ++close) {
      if (text[close] == '(') ++depth;
      if (text[close] == ')' && --depth == 0) break;
    }
    const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
    if (close >= text.size()) {
      return make_error(ErrorCode::spec_error, "line " + std::to_string(line) + ": '" + std::string(name) +
                                          "': the parameter list does not close");
    }
    auto sig = parse_signature(head + text.substr(at, close + 1 - at));
    if (!sig) {
      if (!first_error) first_error = make_error(ErrorCode::spec_error, "line " + std::to_string(line) + ": " + sig.error().message);
      continue;
    }
    sig->line = line;
    return sig;
  }
  if (first_error) return *first_error;
  return make_error(ErrorCode::spec_error, "no declaration 'void " + std::string(name) + "(...)' found");
}

} // namespace ktune
