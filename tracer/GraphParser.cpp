// parseGraph: reads printGraph's text form back into a Graph, with located errors.
//
// Grammar (whitespace and newlines are insignificant; `#` starts a comment to end of line):
//   graph   := 'graph' '(' ['symbols' ':' symbol (',' symbol)*] ')' '{'
//              region* node* 'return' [value (',' value)*] '}'
//   symbol  := SYM 'in' '[' bound ',' bound ']'        symbols numbered s0, s1, ... in order
//   bound   := INT | 'max'                             'max' = INT64_MAX
//   region  := 'region' INT STRING 'type' STRING 'parent' INT 'nodes' '[' INT ',' INT ')'
//              ['list']                                regions numbered 0, 1, ...; parent < own
//   node    := value '=' op ':' type ['@' INT]         values numbered %0, %1, ... in order
//   op      := 'input' ('arg' | 'captured') INT [STRING]
//            | OPNAME '(' [value (',' value)*] ')' attr*
//   attr    := ATTRNAME '=' (INT | DOUBLE | 'true' | 'false' | '[' [INT (',' INT)*] ']')
//   type    := DTYPE '[' [dim (',' dim)*] ']'
//   dim     := INT | SYM '=' INT                       a symbol's dim with its traced value
//   value   := '%' DIGITS        SYM := 's' DIGITS
//   STRING  := '"' (char | '\"' | '\\' | '\n' | '\t' | '\r' | '\xHH')* '"'
// Each op lists exactly the attrs named by opInfo(op).attrs, in any order. Inputs name
// earlier nodes, arities match the op table, and every index is range-checked; dims are
// non-negative, symbol ranges non-empty, and each node's dtype and shape are re-derived by
// shape inference from its inputs and must match: a graph that parses is safe to walk.
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include <rcjit/Error.h>

#include "tracer/CheckedSize.h"
#include "tracer/GraphIO.h"
#include "tracer/GraphVerify.h"
#include "tracer/ShapeInference.h"

namespace rcjit {

namespace {

[[noreturn]] void failAt(int line, int col, const std::string &msg) {
  throw Error("graph text: line " + std::to_string(line) + ", column " + std::to_string(col) +
              ": " + msg);
}

enum class Tok : uint8_t { End, Ident, Number, Value, String, Punct };

struct Token {
  Tok kind = Tok::End;
  std::string_view text; // the source text; for Value the digits after '%'
  std::string str;       // a String's decoded contents
  int line = 1;
  int col = 1;
};

bool isIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool isIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isNumberChar(char c) { return isIdentChar(c) || c == '.' || c == '+' || c == '-'; }

// A printable, short rendering of source text for error messages.
std::string quoteForError(std::string_view s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 24; ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u < 0x20 || u >= 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += s[i];
    }
  }
  return out + (s.size() > 24 ? "...'" : "'");
}

std::string describe(const Token &t) {
  if (t.kind == Tok::End) return "end of input";
  if (t.kind == Tok::Value) return quoteForError("%" + std::string(t.text));
  return quoteForError(t.text);
}

// Splits the text into tokens, tracking 1-based line and byte column.
class Lexer {
public:
  explicit Lexer(std::string_view src) : src_(src) {}

  Token next() {
    skipSpaceAndComments();
    Token t;
    t.line = line_;
    t.col = col_;
    if (pos_ >= src_.size()) return t;
    const char c = src_[pos_];
    if (c == '"') return lexString(t);
    if (c == '%') return lexValue(t);
    if (isIdentStart(c)) return lexWord(t, Tok::Ident, isIdentChar);
    if (isDigit(c) || c == '-' || c == '+' || c == '.') {
      return lexWord(t, Tok::Number, isNumberChar);
    }
    if (std::string_view("()[]{},:=@").find(c) != std::string_view::npos) {
      t.kind = Tok::Punct;
      t.text = src_.substr(pos_, 1);
      bump();
      return t;
    }
    failAt(line_, col_, "unexpected character " + quoteForError(src_.substr(pos_, 1)));
  }

private:
  void bump() {
    if (src_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }

  void skipSpaceAndComments() {
    while (pos_ < src_.size()) {
      const char c = src_[pos_];
      if (c == '#') {
        while (pos_ < src_.size() && src_[pos_] != '\n') bump();
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        bump();
      } else {
        return;
      }
    }
  }

  Token lexWord(Token t, Tok kind, bool (*member)(char)) {
    const size_t start = pos_;
    while (pos_ < src_.size() && member(src_[pos_])) bump();
    t.kind = kind;
    t.text = src_.substr(start, pos_ - start);
    return t;
  }

  Token lexValue(Token t) {
    bump();
    const size_t start = pos_;
    while (pos_ < src_.size() && isDigit(src_[pos_])) bump();
    if (pos_ == start) failAt(t.line, t.col, "expected digits after '%'");
    t.kind = Tok::Value;
    t.text = src_.substr(start, pos_ - start);
    return t;
  }

  int hexDigit(char c) const {
    if (isDigit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    failAt(line_, col_,
           "expected a hex digit in \\x escape, found " + quoteForError(std::string_view(&c, 1)));
  }

  char lexEscape() {
    if (pos_ >= src_.size()) failAt(line_, col_, "unterminated string");
    const char c = src_[pos_];
    const int line = line_, col = col_;
    bump();
    switch (c) {
    case '"':
      return '"';
    case '\\':
      return '\\';
    case 'n':
      return '\n';
    case 't':
      return '\t';
    case 'r':
      return '\r';
    case 'x':
      return lexHexEscape();
    default:
      failAt(line, col, "unknown escape " + quoteForError(std::string("\\") + c));
    }
  }

  char lexHexEscape() {
    int v = 0;
    for (int i = 0; i < 2; ++i) {
      if (pos_ >= src_.size()) failAt(line_, col_, "unterminated string");
      v = v * 16 + hexDigit(src_[pos_]);
      bump();
    }
    return static_cast<char>(v);
  }

  Token lexString(Token t) {
    const size_t start = pos_;
    bump();
    while (true) {
      if (pos_ >= src_.size() || src_[pos_] == '\n') {
        failAt(t.line, t.col, "unterminated string");
      }
      const char c = src_[pos_];
      bump();
      if (c == '"') break;
      t.str += c == '\\' ? lexEscape() : c;
    }
    t.kind = Tok::String;
    t.text = src_.substr(start, pos_ - start);
    return t;
  }

  std::string_view src_;
  size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
};

// A region's node range, checked once the node count is known.
struct PendingRange {
  int region;
  int line;
  int col;
};

// The N of a symbol name "sN", or -1.
int64_t symbolNumber(std::string_view s) {
  int64_t v = -1;
  if (s.size() < 2 || s[0] != 's') return -1;
  const auto res = std::from_chars(s.data() + 1, s.data() + s.size(), v);
  return res.ec == std::errc() && res.ptr == s.data() + s.size() ? v : -1;
}

bool arityOk(OpKind op, size_t n) {
  const int arity = opInfo(op).arity;
  if (arity >= 0) return n == static_cast<size_t>(arity);
  if (op == OpKind::cat) return n >= 1;
  return n == 2 || n == 3; // x, w [, b]
}

std::string arityText(OpKind op) {
  const int arity = opInfo(op).arity;
  if (arity >= 0) return std::to_string(arity);
  return op == OpKind::cat ? "at least 1" : "2 or 3";
}

class Parser {
public:
  Parser(std::string_view text, bool semantic) : lex_(text), semantic_(semantic) { advance(); }

  Graph parse() {
    expectWord("graph");
    parseSymbols();
    expectPunct('{');
    while (atWord("region")) parseRegion();
    while (tok_.kind == Tok::Value) parseNode();
    parseReturn();
    expectPunct('}');
    if (tok_.kind != Tok::End) fail("expected end of input after '}'");
    checkRegionRanges();
    // Whole-graph invariants no single line shows (each input kind's indices 0..n-1, once
    // each, ...) are the verifier's: a graph that parses must verify.
    if (semantic_) {
      try {
        verifyGraph(g_, "parseGraph");
      } catch (const Error &e) {
        throw Error(std::string("graph text: ") + e.what());
      }
    }
    return std::move(g_);
  }

private:
  void advance() { tok_ = lex_.next(); }

  [[noreturn]] void fail(const std::string &msg) const {
    failAt(tok_.line, tok_.col, msg + ", found " + describe(tok_));
  }

  bool atPunct(char c) const {
    return tok_.kind == Tok::Punct && tok_.text.size() == 1 && tok_.text[0] == c;
  }
  bool atWord(std::string_view w) const { return tok_.kind == Tok::Ident && tok_.text == w; }

  void expectPunct(char c) {
    if (!atPunct(c)) fail(std::string("expected '") + c + "'");
    advance();
  }
  void expectWord(std::string_view w) {
    if (!atWord(w)) fail("expected '" + std::string(w) + "'");
    advance();
  }

  std::string expectString(std::string_view what) {
    if (tok_.kind != Tok::String) fail("expected " + std::string(what) + " (a quoted string)");
    std::string s = std::move(tok_.str);
    advance();
    return s;
  }

  int64_t expectInt64(std::string_view what) {
    int64_t v = 0;
    const std::string_view s = tok_.text;
    const auto res = std::from_chars(s.data(), s.data() + s.size(), v);
    const bool whole = res.ptr == s.data() + s.size();
    if (tok_.kind != Tok::Number || !whole || res.ec == std::errc::invalid_argument) {
      fail("expected " + std::string(what) + " (an integer)");
    }
    if (res.ec != std::errc()) fail(std::string(what) + " out of the 64-bit range");
    advance();
    return v;
  }

  // An integer in [lo, hi]; the message names the range when it is out of it.
  int expectIntIn(std::string_view what, int64_t lo, int64_t hi) {
    const Token at = tok_;
    const int64_t v = expectInt64(what);
    if (v < lo || v > hi) {
      failAt(at.line, at.col,
             std::string(what) + " " + std::to_string(v) + " out of range [" + std::to_string(lo) +
                 ", " + std::to_string(hi) + "]");
    }
    return static_cast<int>(v);
  }

  double expectDouble(std::string_view what) {
    double v = 0;
    const std::string_view s = tok_.text;
    const auto res = std::from_chars(s.data(), s.data() + s.size(), v);
    const bool ok = (tok_.kind == Tok::Number || tok_.kind == Tok::Ident) &&
                    res.ec == std::errc() && res.ptr == s.data() + s.size();
    if (!ok) fail("expected " + std::string(what) + " (a number)");
    advance();
    return std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v;
  }

  bool expectBool(std::string_view what) {
    if (!atWord("true") && !atWord("false")) {
      fail("expected " + std::string(what) + " ('true' or 'false')");
    }
    const bool v = atWord("true");
    advance();
    return v;
  }

  // A collective's reduce op: sum, mean or max (Attrs::reduce 0, 1, 2).
  int64_t expectReduce() {
    for (int64_t r = 0; r < 3; ++r) {
      if (atWord(collectiveReduceName(r))) {
        advance();
        return r;
      }
    }
    fail("expected reduce ('sum', 'mean' or 'max')");
  }

  // A value reference %N with N < limit.
  int expectValue(std::string_view what, size_t limit) {
    if (tok_.kind != Tok::Value) fail("expected " + std::string(what) + " (%N)");
    int64_t v = -1;
    const std::string_view s = tok_.text;
    const auto res = std::from_chars(s.data(), s.data() + s.size(), v);
    if (res.ec != std::errc() || v < 0 || static_cast<uint64_t>(v) >= limit) {
      fail(std::string(what) + " must name one of %0..%" +
           std::to_string(static_cast<int64_t>(limit) - 1));
    }
    advance();
    return static_cast<int>(v);
  }

  // A symbol reference sN; `limit` symbols exist (or, while declaring, N must equal limit).
  int expectSymbol(size_t limit, bool declaring) {
    const int64_t v = tok_.kind == Tok::Ident ? symbolNumber(tok_.text) : -1;
    const auto want = static_cast<int64_t>(limit);
    if (declaring && v != want) fail("expected symbol s" + std::to_string(want));
    if (!declaring && (v < 0 || v >= want)) {
      fail(limit ? "expected a symbol s0..s" + std::to_string(want - 1)
                 : std::string("expected an integer dim (the graph declares no symbols)"));
    }
    advance();
    return static_cast<int>(v);
  }

  int64_t expectBound() {
    if (atWord("max")) {
      advance();
      return INT64_MAX;
    }
    return expectInt64("a symbol bound");
  }

  void parseSymbols() {
    expectPunct('(');
    if (atWord("symbols")) {
      advance();
      expectPunct(':');
      parseSymbol();
      while (atPunct(',')) {
        advance();
        parseSymbol();
      }
    }
    expectPunct(')');
  }

  void parseSymbol() {
    expectSymbol(g_.symbols.size(), true);
    expectWord("in");
    expectPunct('[');
    Symbol s;
    const Token at = tok_;
    s.min = expectBound();
    expectPunct(',');
    s.max = expectBound();
    if (semantic_ && (s.min < 0 || s.min > s.max)) {
      failAt(at.line, at.col,
             "symbol s" + std::to_string(g_.symbols.size()) + " has the empty or negative range [" +
                 std::to_string(s.min) + ", " + std::to_string(s.max) +
                 "] (expected 0 <= min <= max)");
    }
    expectPunct(']');
    g_.symbols.push_back(s);
  }

  void parseRegion() {
    advance();
    const auto index = static_cast<int64_t>(g_.regions.size());
    expectIntIn("region number", index, index);
    Region r;
    r.name = expectString("the region name");
    expectWord("type");
    r.type = expectString("the region type");
    expectWord("parent");
    r.parent = expectIntIn("parent region", -1, index - 1);
    expectWord("nodes");
    pending_.push_back({static_cast<int>(index), tok_.line, tok_.col});
    expectPunct('[');
    r.begin = expectIntIn("region begin", 0, INT32_MAX);
    expectPunct(',');
    r.end = expectIntIn("region end", r.begin, INT32_MAX);
    expectPunct(')');
    if (atWord("list")) {
      r.inList = true;
      advance();
    }
    g_.regions.push_back(std::move(r));
  }

  void parseNode() {
    const auto id = g_.nodes.size();
    if (tok_.text != std::to_string(id)) fail("expected node %" + std::to_string(id));
    const Token at = tok_;
    advance();
    expectPunct('=');
    Node n;
    if (atWord("input")) {
      parseInputOp(n);
    } else {
      parseComputeOp(n, id);
    }
    expectPunct(':');
    parseType(n);
    if (atPunct('@')) {
      advance();
      n.region = expectIntIn("region", 0, static_cast<int64_t>(g_.regions.size()) - 1);
    }
    if (semantic_) checkMeta(n, id, at);
    g_.nodes.push_back(std::move(n));
  }

  // The node's declared dtype and shape must be what its op gives for its inputs (its
  // size must be countable at all, for inputs and sources).
  void checkMeta(const Node &n, size_t id, const Token &at) const {
    const std::string where =
        "node %" + std::to_string(id) + " (" + std::string(opName(n.op)) + ")";
    const Shape declared = concreteShape(n.shape);
    TensorMeta m{n.dtype, declared};
    try {
      if (n.op == OpKind::input || opInfo(n.op).category == OpCategory::Source) {
        detail::checkedBytes(declared, n.dtype, opName(n.op));
      } else {
        std::vector<TensorMeta> in;
        for (int i : n.inputs) in.push_back({g_.nodes[i].dtype, concreteShape(g_.nodes[i].shape)});
        m = inferMeta(n.op, in, n.attrs);
        if (n.op == OpKind::cast) m.dtype = n.dtype; // a cast's dtype is its target
      }
    } catch (const Error &e) {
      failAt(at.line, at.col, where + ": " + e.what());
    }
    if (m.dtype != n.dtype || m.shape != declared) {
      failAt(at.line, at.col,
             where + " is declared " + std::string(dtypeName(n.dtype)) + shapeStr(declared) +
                 " but its op gives " + std::string(dtypeName(m.dtype)) + shapeStr(m.shape) +
                 " for its inputs");
    }
  }

  void parseInputOp(Node &n) {
    advance();
    n.op = OpKind::input;
    if (atWord("arg")) {
      n.inputKind = InputKind::arg;
    } else if (atWord("captured")) {
      n.inputKind = InputKind::captured;
    } else {
      fail("expected 'arg' or 'captured'");
    }
    advance();
    n.inputIndex = expectIntIn("input index", 0, INT32_MAX);
    if (tok_.kind == Tok::String) n.name = expectString("the input name");
  }

  void parseComputeOp(Node &n, size_t id) {
    if (tok_.kind != Tok::Ident || !opFromName(tok_.text, n.op) || n.op == OpKind::input) {
      fail("expected an op name");
    }
    const Token opTok = tok_;
    advance();
    expectPunct('(');
    if (!atPunct(')')) {
      n.inputs.push_back(expectValue("an earlier node", id));
      while (atPunct(',')) {
        advance();
        n.inputs.push_back(expectValue("an earlier node", id));
      }
    }
    expectPunct(')');
    if (!arityOk(n.op, n.inputs.size())) {
      failAt(opTok.line, opTok.col,
             "op '" + std::string(opName(n.op)) + "' takes " + arityText(n.op) + " inputs, not " +
                 std::to_string(n.inputs.size()));
    }
    parseAttrs(n);
  }

  void parseAttrs(Node &n) {
    const uint32_t used = opInfo(n.op).attrs;
    uint32_t seen = 0;
    while (tok_.kind == Tok::Ident) {
      const AttrBit bit = attrBitOf(tok_.text, used);
      if (seen & bit) fail("duplicate attribute");
      seen |= bit;
      advance();
      expectPunct('=');
      parseAttrValue(bit, n.attrs);
    }
    for (uint32_t bit = 1; bit <= kLastAttrBit; bit <<= 1) {
      if ((used & bit) && !(seen & bit)) {
        fail("expected attribute '" + std::string(attrName(static_cast<AttrBit>(bit))) +
             "' of op '" + std::string(opName(n.op)) + "'");
      }
    }
  }

  AttrBit attrBitOf(std::string_view name, uint32_t used) const {
    for (uint32_t bit = 1; bit <= kLastAttrBit; bit <<= 1) {
      if ((used & bit) && attrName(static_cast<AttrBit>(bit)) == name) {
        return static_cast<AttrBit>(bit);
      }
    }
    fail("expected an attribute of this op or ':'");
  }

  void parseAttrValue(AttrBit bit, Attrs &a) {
    switch (bit) {
    case kDims:
      a.dims = parseIntList();
      break;
    case kDim:
      a.dim = expectInt64("dim");
      break;
    case kStart:
      a.start = expectInt64("start");
      break;
    case kEnd:
      a.end = expectInt64("end");
      break;
    case kStride:
      a.stride = expectInt64("stride");
      break;
    case kPadding:
      a.padding = expectInt64("padding");
      break;
    case kValue:
      a.value = expectDouble("value");
      break;
    case kEps:
      a.eps = expectDouble("eps");
      break;
    case kKeepdim:
      a.keepdim = expectBool("keepdim");
      break;
    case kCausal:
      a.causal = expectBool("causal");
      break;
    case kReduce:
      a.reduce = expectReduce();
      break;
    case kRoot:
      a.root = expectInt64("root");
      break;
    case kWorld:
      a.world = expectInt64("world");
      break;
    }
  }

  Dims parseIntList() {
    Dims dims;
    expectPunct('[');
    if (!atPunct(']')) {
      dims.push_back(expectInt64("a dim"));
      while (atPunct(',')) {
        advance();
        dims.push_back(expectInt64("a dim"));
      }
    }
    expectPunct(']');
    return dims;
  }

  DType expectDType() {
    for (int i = 0; i <= static_cast<int>(DType::boolean); ++i) {
      const auto t = static_cast<DType>(i);
      if (atWord(dtypeName(t))) {
        advance();
        return t;
      }
    }
    fail("expected a dtype (f32, f64, f16, bf16, i32, i64, bool)");
  }

  void parseType(Node &n) {
    n.dtype = expectDType();
    expectPunct('[');
    if (!atPunct(']')) {
      n.shape.push_back(parseDim());
      while (atPunct(',')) {
        advance();
        n.shape.push_back(parseDim());
      }
    }
    expectPunct(']');
  }

  Dim parseDim() {
    Dim d;
    if (tok_.kind == Tok::Ident) {
      d.sym = expectSymbol(g_.symbols.size(), false);
      expectPunct('=');
    }
    const Token at = tok_;
    d.value = expectInt64("a dim size");
    if (!semantic_) return d;
    if (d.value < 0)
      failAt(at.line, at.col, "dim size " + std::to_string(d.value) + " is negative");
    if (d.isSymbolic()) {
      const Symbol &s = g_.symbols[static_cast<size_t>(d.sym)];
      if (d.value < s.min || d.value > s.max) {
        failAt(at.line, at.col,
               "dim s" + std::to_string(d.sym) + "=" + std::to_string(d.value) +
                   " is outside the symbol's range [" + std::to_string(s.min) + ", " +
                   std::to_string(s.max) + "]");
      }
    }
    return d;
  }

  void parseReturn() {
    expectWord("return");
    if (tok_.kind != Tok::Value) return;
    g_.outputs.push_back(expectValue("an output", g_.nodes.size()));
    while (atPunct(',')) {
      advance();
      g_.outputs.push_back(expectValue("an output", g_.nodes.size()));
    }
  }

  void checkRegionRanges() const {
    for (const PendingRange &p : pending_) {
      const Region &r = g_.regions[static_cast<size_t>(p.region)];
      if (static_cast<size_t>(r.end) > g_.nodes.size()) {
        failAt(p.line, p.col,
               "region " + std::to_string(p.region) + " ends at node " + std::to_string(r.end) +
                   " but the graph has " + std::to_string(g_.nodes.size()) + " nodes");
      }
    }
  }

  Lexer lex_;
  bool semantic_; // check dims, symbol ranges and shapes too
  Token tok_;
  Graph g_;
  std::vector<PendingRange> pending_;
};

} // namespace

Graph parseGraph(std::string_view text) { return Parser(text, true).parse(); }

Graph parseGraphText(std::string_view text) { return Parser(text, false).parse(); }

} // namespace rcjit
