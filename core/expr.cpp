#include "core/expr.hpp"

#include <muParser.h>

#include <cmath>
#include <cstdio>

namespace ktune {
namespace {

using mu::value_type;

// Doubles hold every integer up to 2^53 exactly; beyond that integer arithmetic on the
// truncated value would be no more exact than the real one, so it is not attempted.
constexpr double k_exact_integer_limit = 9007199254740992.0; // 2^53

bool is_exact_integer(value_type v) {
  return std::isfinite(v) && v == std::trunc(v) && std::fabs(v) <= k_exact_integer_limit;
}

value_type op_add(value_type a, value_type b) { return a + b; }
value_type op_sub(value_type a, value_type b) { return a - b; }
value_type op_mul(value_type a, value_type b) { return a * b; }

value_type op_div(value_type a, value_type b) {
  if (b == 0) throw mu::ParserError("division by zero");
  if (is_exact_integer(a) && is_exact_integer(b)) {
    return static_cast<value_type>(static_cast<std::int64_t>(a) / static_cast<std::int64_t>(b));
  }
  return a / b;
}

value_type op_rem(value_type a, value_type b) {
  if (b == 0) throw mu::ParserError("remainder by zero");
  if (is_exact_integer(a) && is_exact_integer(b)) {
    return static_cast<value_type>(static_cast<std::int64_t>(a) % static_cast<std::int64_t>(b));
  }
  return std::fmod(a, b); // the C remainder: the sign follows the dividend
}

value_type op_lt(value_type a, value_type b) { return a < b ? 1 : 0; }
value_type op_le(value_type a, value_type b) { return a <= b ? 1 : 0; }
value_type op_gt(value_type a, value_type b) { return a > b ? 1 : 0; }
value_type op_ge(value_type a, value_type b) { return a >= b ? 1 : 0; }
value_type op_eq(value_type a, value_type b) { return a == b ? 1 : 0; }
value_type op_ne(value_type a, value_type b) { return a != b ? 1 : 0; }
value_type op_and(value_type a, value_type b) { return (a != 0 && b != 0) ? 1 : 0; }
value_type op_or(value_type a, value_type b) { return (a != 0 || b != 0) ? 1 : 0; }
value_type op_not(value_type a) { return a == 0 ? 1 : 0; }

value_type fn_ceil_div(value_type a, value_type b) {
  if (b == 0) throw mu::ParserError("ceil_div by zero");
  if (is_exact_integer(a) && is_exact_integer(b)) {
    const auto x = static_cast<std::int64_t>(a);
    const auto y = static_cast<std::int64_t>(b);
    std::int64_t q = x / y;
    if (x % y != 0 && ((x < 0) == (y < 0))) ++q;
    return static_cast<value_type>(q);
  }
  return std::ceil(a / b);
}

value_type fn_min(value_type a, value_type b) { return a < b ? a : b; }
value_type fn_max(value_type a, value_type b) { return a > b ? a : b; }

// Precedences follow C: || < && < == != < relational < + - < * / %. muparser's unary minus
// binds like * / % (prINFIX), which gives the same value as C for these operators.
void configure(mu::Parser& parser) {
  parser.EnableBuiltInOprt(false);
  parser.DefineOprt("||", op_or, 1);
  parser.DefineOprt("&&", op_and, 2);
  parser.DefineOprt("==", op_eq, 3);
  parser.DefineOprt("!=", op_ne, 3);
  parser.DefineOprt("<", op_lt, 4);
  parser.DefineOprt("<=", op_le, 4);
  parser.DefineOprt(">", op_gt, 4);
  parser.DefineOprt(">=", op_ge, 4);
  parser.DefineOprt("+", op_add, 5);
  parser.DefineOprt("-", op_sub, 5);
  parser.DefineOprt("*", op_mul, 6);
  parser.DefineOprt("/", op_div, 6);
  parser.DefineOprt("%", op_rem, 6);
  parser.DefineInfixOprt("!", op_not);
  // Only ktune's functions: muparser's real-valued ones (sin, log, ...), its constants (_pi, _e)
  // and its variadic min/max are removed.
  parser.ClearFun();
  parser.ClearConst();
  parser.DefineFun("ceil_div", fn_ceil_div, false);
  parser.DefineFun("min", fn_min, false);
  parser.DefineFun("max", fn_max, false);
}

std::string format_number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.15g", v);
  return buffer;
}

std::string describe(const mu::ParserError& error) {
  std::string message = error.GetMsg();
  // muparser's messages already carry "at position N" where it knows one; evaluation errors
  // raised by ktune's operators carry none.
  while (!message.empty() && (message.back() == '.' || message.back() == ' ')) message.pop_back();
  return message;
}

Error expression_error(const std::string& text, const std::string& reason) {
  return make_error(ErrorCode::bad_expression, "expression '" + text + "': " + reason);
}

} // namespace

struct Expr::Impl {
  mu::Parser parser;
  std::vector<std::string> names;
  std::vector<double> values; // muparser holds pointers into this; never resized after compile
  std::vector<bool> used;      // whether the expression reads names[i]
};

Expr::Expr(Expr&&) noexcept = default;
Expr& Expr::operator=(Expr&&) noexcept = default;
Expr::~Expr() = default;

Result<Expr> Expr::compile(const std::string& text, const std::vector<std::string>& variables) {
  Expr expr;
  expr.m_text = text;
  expr.m_impl = std::make_unique<Impl>();
  Impl& impl = *expr.m_impl;
  impl.names = variables;
  impl.values.assign(variables.size(), 0.0);

  if (text.find_first_not_of(" \t") == std::string::npos) {
    return expression_error(text, "empty expression");
  }
  try {
    configure(impl.parser);
    for (std::size_t i = 0; i < variables.size(); ++i) {
      impl.parser.DefineVar(variables[i], &impl.values[i]);
    }
    impl.parser.SetExpr(text);
    // Parses the whole expression (syntax errors surface here, not at the first evaluation)
    // while collecting every variable name it uses, defined or not.
    const mu::varmap_type& used = impl.parser.GetUsedVar();
    impl.used.assign(variables.size(), false);
    for (const auto& [name, address] : used) {
      if (address == nullptr) return expression_error(text, "unknown variable '" + name + "'");
      for (std::size_t i = 0; i < variables.size(); ++i) {
        if (variables[i] == name) impl.used[i] = true;
      }
    }
  } catch (const mu::ParserError& error) {
    return expression_error(text, describe(error));
  }
  return expr;
}

Result<double> Expr::eval(const NamedValues& bindings) const {
  Impl& impl = *m_impl;
  for (std::size_t i = 0; i < impl.names.size(); ++i) {
    if (!impl.used[i]) continue;
    bool bound = false;
    for (const auto& [name, value] : bindings) {
      if (name == impl.names[i]) {
        impl.values[i] = static_cast<double>(value);
        bound = true;
        break;
      }
    }
    if (!bound) return expression_error(m_text, "variable '" + impl.names[i] + "' is not bound");
  }
  try {
    const double result = impl.parser.Eval();
    if (!std::isfinite(result)) return expression_error(m_text, "result is not finite");
    return result;
  } catch (const mu::ParserError& error) {
    return expression_error(m_text, describe(error));
  }
}

Result<std::int64_t> Expr::eval_int(const NamedValues& bindings) const {
  Result<double> value = eval(bindings);
  if (!value) return value.error();
  const double v = *value;
  if (v != std::trunc(v)) {
    return expression_error(m_text, "expected an integer result, got " + format_number(v));
  }
  // 2^63 is the first double that does not fit an int64.
  constexpr double k_int64_limit = 9223372036854775808.0;
  if (v >= k_int64_limit || v < -k_int64_limit) {
    return expression_error(m_text, "result " + format_number(v) + " does not fit in 64 bits");
  }
  return static_cast<std::int64_t>(v);
}

} // namespace ktune
