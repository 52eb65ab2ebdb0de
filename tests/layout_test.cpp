// The house rules that a reviewer would otherwise check by hand (ARCHITECTURE.md, "Folders
// and layers"): the top-level folders form layers, each including only folders below it; no
// source file outside tests/ is over 800 lines, and no function over 120.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path kRoot = RCJIT_SOURCE_DIR;

// Bottom up: a folder may include itself and the folders before it. Keep in step with
// ARCHITECTURE.md's layer list.
const std::vector<std::string> kLayers = {
    "include", "support", "tracer", "autograd", "guards",   "dist",  "cache", "targets",
    "jit",     "models",  "onnx",   "tools",    "examples", "bench", "fuzz",  "tests"};

// Lists what a scan found, one per line, for a failure message.
std::string listed(const std::vector<std::string> &found) {
  std::ostringstream msg;
  for (const std::string &f : found) msg << "  " << f << "\n";
  return msg.str();
}

int layerOf(const std::string &folder) {
  auto it = std::find(kLayers.begin(), kLayers.end(), folder);
  return it == kLayers.end() ? -1 : static_cast<int>(it - kLayers.begin());
}

bool isSource(const fs::path &p) {
  const std::string ext = p.extension().string();
  return ext == ".cpp" || ext == ".h" || ext == ".def" || ext == ".inc";
}

// Every source file under the layered folders, as a path relative to the root.
std::vector<fs::path> sources() {
  std::vector<fs::path> out;
  for (const std::string &folder : kLayers) {
    if (!fs::exists(kRoot / folder)) continue;
    for (const auto &e : fs::recursive_directory_iterator(kRoot / folder)) {
      if (e.is_regular_file() && isSource(e.path())) out.push_back(fs::relative(e.path(), kRoot));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> linesOf(const fs::path &p) {
  std::ifstream in(kRoot / p);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

TEST(Layout, FoldersIncludeOnlyFoldersBelowThem) {
  const std::regex include(R"(^\s*#\s*include\s+"([A-Za-z_]+)/)");
  std::vector<std::string> upward;
  size_t files = 0;
  for (const fs::path &p : sources()) {
    ++files;
    const std::string folder = p.begin()->string();
    int mine = layerOf(folder);
    std::vector<std::string> lines = linesOf(p);
    for (size_t i = 0; i < lines.size(); ++i) {
      std::smatch m;
      if (!std::regex_search(lines[i], m, include)) continue;
      int theirs = layerOf(m[1].str());
      const std::string edge = p.string() + " -> " + m[1].str();
      if (theirs > mine && std::find(upward.begin(), upward.end(), edge) == upward.end()) {
        upward.push_back(edge);
      }
    }
  }
  EXPECT_GT(files, 100u) << "the scan found the tree at " << kRoot;
  EXPECT_TRUE(upward.empty()) << "includes of a folder above the includer (declare a hook "
                                 "below, install it from above):\n"
                              << listed(upward);
}

TEST(Layout, NoSourceFileOver800Lines) {
  std::vector<std::string> big;
  for (const fs::path &p : sources()) {
    if (p.begin()->string() == "tests") continue;
    size_t n = linesOf(p).size();
    if (n > 800) big.push_back(p.string());
  }
  EXPECT_TRUE(big.empty()) << "source files over 800 lines (split them along meaning):\n"
                           << listed(big);
}

// The source with comments, string and character literals and preprocessor lines blanked
// (newlines kept, so line numbers hold).
std::string codeOnly(const std::vector<std::string> &lines) {
  std::string s;
  for (const std::string &l : lines) {
    size_t first = l.find_first_not_of(" \t");
    s += first != std::string::npos && l[first] == '#' ? std::string() : l;
    s += '\n';
  }
  std::string out = s;
  enum { code, line, block, str, chr, raw } st = code;
  std::string rawEnd;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i], n = i + 1 < s.size() ? s[i + 1] : '\0';
    switch (st) {
    case code:
      if (c == '/' && n == '/')
        st = line;
      else if (c == '/' && n == '*')
        st = block;
      else if (c == 'R' && n == '"' &&
               (i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1])))) {
        size_t open = s.find('(', i + 2);
        rawEnd = ")" + s.substr(i + 2, open - i - 2) + "\"";
        st = raw;
      } else if (c == '"')
        st = str;
      else if (c == '\'' && !(i > 0 && std::isxdigit(static_cast<unsigned char>(s[i - 1]))))
        st = chr;
      if (st != code) out[i] = ' ';
      break;
    case line:
      if (c == '\n')
        st = code;
      else
        out[i] = ' ';
      break;
    case block:
      if (c == '*' && n == '/') {
        out[i] = out[i + 1] = ' ';
        ++i;
        st = code;
      } else if (c != '\n') {
        out[i] = ' ';
      }
      break;
    case str:
    case chr:
      if (c == '\\') {
        out[i] = ' ';
        if (n != '\n') out[++i] = ' ';
      } else {
        if ((st == str && c == '"') || (st == chr && c == '\'')) st = code;
        if (c != '\n') out[i] = ' ';
      }
      break;
    case raw:
      if (s.compare(i, rawEnd.size(), rawEnd) == 0) {
        for (size_t k = 0; k < rawEnd.size(); ++k) out[i + k] = ' ';
        i += rawEnd.size() - 1;
        st = code;
      } else if (c != '\n') {
        out[i] = ' ';
      }
      break;
    }
  }
  return out;
}

struct Function {
  std::string file, head;
  int first = 0, last = 0; // 1-based lines: where its declaration starts, its closing brace
};

// Function bodies at namespace or class level: a '{' whose declaration (the text since the
// previous ';', '{' or '}' at that level) has a parameter list and is not a class, enum,
// namespace or a braced initializer. A lambda or local class belongs to its function.
std::vector<Function> functionsIn(const fs::path &p) {
  const std::string code = codeOnly(linesOf(p));
  std::vector<Function> out;
  size_t declStart = 0;
  int line = 1;
  bool inFunction = false;
  int functionDepth = 0;
  Function current;
  const std::regex container(
      R"(^\s*(template\s*<.*>\s*)?(namespace|class|struct|union|enum|extern)\b)");
  for (size_t i = 0; i < code.size(); ++i) {
    char c = code[i];
    if (c == '\n') {
      ++line;
      continue;
    }
    if (inFunction) {
      if (c == '{') ++functionDepth;
      if (c == '}' && --functionDepth == 0) {
        current.last = line;
        out.push_back(current);
        inFunction = false;
        declStart = i + 1;
      }
      continue;
    }
    if (c == ';' || c == '}') {
      declStart = i + 1;
      continue;
    }
    if (c != '{') continue;
    std::string decl = code.substr(declStart, i - declStart);
    // the declaration's first line: skip the blank lines before it
    size_t firstChar = std::min(decl.find_first_not_of(" \t\n"), decl.size());
    int first =
        line - static_cast<int>(std::count(decl.begin() + static_cast<std::ptrdiff_t>(firstChar),
                                           decl.end(), '\n'));
    std::string flat = decl;
    std::replace(flat.begin(), flat.end(), '\n', ' ');
    const bool isContainer = std::regex_search(flat, container);
    const bool initializer = std::regex_search(flat, std::regex(R"(=\s*$)"));
    if (!isContainer && !initializer && flat.find('(') != std::string::npos) {
      inFunction = true;
      functionDepth = 1;
      flat.erase(0, std::min(flat.find_first_not_of(' '), flat.size()));
      current = {p.string(), flat.substr(0, 160), first, 0};
    } else { // a namespace, class or initializer: its members are declarations again
      declStart = i + 1;
    }
  }
  return out;
}

TEST(Layout, NoFunctionOver120Lines) {
  std::vector<std::string> big;
  size_t functions = 0;
  for (const fs::path &p : sources()) {
    if (p.begin()->string() == "tests" || p.extension() == ".def") continue;
    for (const Function &f : functionsIn(p)) {
      ++functions;
      int n = f.last - f.first + 1;
      if (n > 120) {
        big.push_back(f.file + ": " + f.head.substr(0, f.head.find('(') + 1));
      }
    }
  }
  EXPECT_GT(functions, 1000u) << "the scan found the functions";
  EXPECT_TRUE(big.empty()) << "functions over 120 lines (split them along meaning):\n"
                           << listed(big);
}

} // namespace
