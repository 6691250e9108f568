#pragma once
// Integer expressions over shape dims and params, evaluated with muparser.
//
// Semantics: values are integers; `/` between two integral values truncates toward zero (C
// semantics), otherwise it is real division; `%` is the C remainder; comparisons and `&&`/`||`
// give 0 or 1, as does unary `!`; `c ? a : b` selects; the only functions are ceil_div(a,b),
// min(a,b) and max(a,b) (no muparser real-valued functions or constants). A result that is not
// integral is an error for eval_int; division or remainder by zero is an error.
//
// Thread safety: an Expr may be evaluated from one thread at a time (muparser keeps state).
#include "core/result.hpp"
#include "core/shape.hpp"

#include <memory>
#include <string>
#include <vector>

namespace mu { class Parser; }

namespace ktune {

class Expr {
public:
  // Compiles `text` for the given variable names. Errors (code "bad_expression") name the
  // expression and muparser's reason (unknown variable, syntax error at position N).
  [[nodiscard]] static Result<Expr> compile(const std::string& text,
                                            const std::vector<std::string>& variables);

  // Evaluates with `bindings` (every variable given at compile time must be bound; extra
  // bindings are ignored; an unbound variable the expression reads is an error). Errors use code
  // "bad_expression": division or remainder by zero, a non-finite result, and for eval_int a
  // result that is not integral or does not fit in 64 bits.
  [[nodiscard]] Result<double> eval(const NamedValues& bindings) const;
  [[nodiscard]] Result<std::int64_t> eval_int(const NamedValues& bindings) const;

  [[nodiscard]] const std::string& text() const { return m_text; }

  Expr(Expr&&) noexcept;
  Expr& operator=(Expr&&) noexcept;
  ~Expr();

private:
  Expr() = default;
  struct Impl;
  std::string m_text;
  std::unique_ptr<Impl> m_impl;
};

} // namespace ktune
