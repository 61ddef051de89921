#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <atomic>
#include <cctype>

#include "core/log.h"
#include "tokenizer/utf8.h"

namespace ls::tok {

namespace {

// Oniguruma accepts long general-category names, case-insensitively and ignoring '_', ' ' and
// '-'; PCRE2 10.42 only knows the short ones. Scripts and binary properties pass through.
std::string canonical_property(std::string_view name) {
  std::string key;
  for (char c : name) {
    if (c == '_' || c == ' ' || c == '-') continue;
    key.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  static const std::array<std::pair<std::string_view, std::string_view>, 44> kNames = {{
      {"letter", "L"},
      {"casedletter", "L&"},
      {"uppercaseletter", "Lu"},
      {"lowercaseletter", "Ll"},
      {"titlecaseletter", "Lt"},
      {"modifierletter", "Lm"},
      {"otherletter", "Lo"},
      {"mark", "M"},
      {"combiningmark", "M"},
      {"nonspacingmark", "Mn"},
      {"spacingmark", "Mc"},
      {"enclosingmark", "Me"},
      {"number", "N"},
      {"decimalnumber", "Nd"},
      {"digit", "Nd"},
      {"letternumber", "Nl"},
      {"othernumber", "No"},
      {"punctuation", "P"},
      {"punct", "P"},
      {"connectorpunctuation", "Pc"},
      {"dashpunctuation", "Pd"},
      {"openpunctuation", "Ps"},
      {"closepunctuation", "Pe"},
      {"initialpunctuation", "Pi"},
      {"finalpunctuation", "Pf"},
      {"otherpunctuation", "Po"},
      {"symbol", "S"},
      {"mathsymbol", "Sm"},
      {"currencysymbol", "Sc"},
      {"modifiersymbol", "Sk"},
      {"othersymbol", "So"},
      {"separator", "Z"},
      {"spaceseparator", "Zs"},
      {"lineseparator", "Zl"},
      {"paragraphseparator", "Zp"},
      {"other", "C"},
      {"control", "Cc"},
      {"cntrl", "Cc"},
      {"format", "Cf"},
      {"surrogate", "Cs"},
      {"privateuse", "Co"},
      {"unassigned", "Cn"},
      {"space", "White_Space"},
      {"alpha", "Alphabetic"},
  }};
  for (const auto& [long_name, short_name] : kNames) {
    if (key == long_name) return std::string(short_name);
  }
  // One- or two-letter category abbreviations, in any case ("l", "lu").
  static constexpr std::string_view kShort =
      "l lu ll lt lm lo m mn mc me n nd nl no p pc pd ps pe pi pf po s sm sc sk so z zs zl zp c cc "
      "cf cs co cn";
  if (key.size() <= 2) {
    size_t pos = 0;
    while (pos < kShort.size()) {
      size_t end = kShort.find(' ', pos);
      if (end == std::string_view::npos) end = kShort.size();
      if (kShort.substr(pos, end - pos) == key) {
        std::string out(1, static_cast<char>(std::toupper(static_cast<unsigned char>(key[0]))));
        if (key.size() == 2) out.push_back(key[1]);
        return out;
      }
      pos = end + 1;
    }
  }
  return std::string(name);
}

bool is_hex(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}

// Oniguruma's Unicode \w (measured on the Oniguruma that HF tokenizers bundles): Alphabetic
// (letters, Nl, the circled/squared letters of Other_Alphabetic), marks, Nd and Pc. A bare \w
// also takes the Latin-1 superscript digits and fractions (its ISO-8859-1 fast path); \w inside
// a bracket class does not.
constexpr std::string_view kOnigWordInClass =
    "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{24B6}-\\x{24E9}\\x{1F130}-\\x{1F149}"
    "\\x{1F150}-\\x{1F169}\\x{1F170}-\\x{1F189}";
constexpr std::string_view kOnigWordLatin1Extra = "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";

}  // namespace

Result<std::string> translate_onig_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  int class_depth = 0;
  size_t i = 0;
  // Copies the bracket-class opening at p[i] == '[' (with '^' and a leading literal ']').
  auto open_class = [&]() {
    out.push_back('[');
    ++i;
    if (i < p.size() && p[i] == '^') out.push_back(p[i++]);
    if (i < p.size() && p[i] == ']') out.push_back(p[i++]);
    ++class_depth;
  };
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) return invalid_argument("regex '{}' ends with a backslash", p);
      const char e = p[i + 1];
      const bool in_class = class_depth > 0;
      i += 2;
      switch (e) {
        case 's':
          out += "\\p{White_Space}";
          break;
        case 'S':
          out += "\\P{White_Space}";
          break;
        case 'd':
          out += "\\p{Nd}";
          break;
        case 'D':
          out += "\\P{Nd}";
          break;
        case 'w':
          if (in_class) {
            out += kOnigWordInClass;
          } else {
            out += "[";
            out += kOnigWordInClass;
            out += kOnigWordLatin1Extra;
            out += "]";
          }
          break;
        case 'W':
          if (in_class) {
            out += "\\W";  // a negated set cannot be spliced into a class; PCRE2's meaning
          } else {
            out += "[^";
            out += kOnigWordInClass;
            out += kOnigWordLatin1Extra;
            out += "]";
          }
          break;
        case 'h':
          out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
          break;
        case 'H':
          out += in_class ? "\\H" : "[^0-9a-fA-F]";
          break;
        case 'u':
          if (i + 4 <= p.size() && is_hex(p[i]) && is_hex(p[i + 1]) && is_hex(p[i + 2]) &&
              is_hex(p[i + 3])) {
            out += "\\x{";
            out.append(p.substr(i, 4));
            out += "}";
            i += 4;
          } else {
            out += "\\u";
          }
          break;
        case 'p':
        case 'P': {
          if (i < p.size() && p[i] == '{') {
            const size_t close = p.find('}', i);
            if (close == std::string_view::npos) {
              return invalid_argument("regex '{}': unterminated \\{}{{", p, e);
            }
            std::string_view name = p.substr(i + 1, close - i - 1);
            bool negated = e == 'P';
            if (!name.empty() && name[0] == '^') {
              negated = !negated;
              name.remove_prefix(1);
            }
            out += negated ? "\\P{" : "\\p{";
            out += canonical_property(name);
            out += "}";
            i = close + 1;
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
          break;
        }
        default:
          out.push_back('\\');
          out.push_back(e);
          break;
      }
      continue;
    }
    if (c == '(' && class_depth == 0 && i + 1 < p.size() && p[i + 1] == '?') {
      // Inline options: Ruby's (?m) is PCRE2's (?s) (dot matches newline); ^/$ are already
      // line anchors through PCRE2_MULTILINE.
      size_t j = i + 2;
      while (j < p.size() && (p[j] == 'i' || p[j] == 'm' || p[j] == 'x' || p[j] == '-')) ++j;
      if (j > i + 2 && j < p.size() && (p[j] == ':' || p[j] == ')')) {
        out += "(?";
        for (size_t k = i + 2; k < j; ++k) out.push_back(p[k] == 'm' ? 's' : p[k]);
        i = j;
        continue;
      }
    }
    if (c == '[') {
      if (class_depth == 0) {
        open_class();
        continue;
      }
      if (i + 1 < p.size() && p[i + 1] == ':') {  // POSIX class such as [:alpha:]
        const size_t close = p.find(":]", i + 2);
        if (close != std::string_view::npos) {
          out.append(p.substr(i, close + 2 - i));
          i = close + 2;
          continue;
        }
      }
      return unimplemented("regex '{}': nested bracket classes are not supported", p);
    }
    if (c == ']' && class_depth > 0) {
      --class_depth;
    } else if (c == '&' && class_depth > 0 && i + 1 < p.size() && p[i + 1] == '&') {
      return unimplemented("regex '{}': class intersection (&&) is not supported", p);
    }
    out.push_back(c);
    ++i;
  }
  return out;
}

Result<std::shared_ptr<const Regex>> Regex::compile(std::string_view onig_pattern) {
  LS_ASSIGN_OR_RETURN(std::string translated, translate_onig_pattern(onig_pattern));
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> msg{};
    pcre2_get_error_message(error_code, msg.data(), msg.size());
    return invalid_argument("regex '{}' does not compile: {} (at offset {})", onig_pattern,
                            reinterpret_cast<const char*>(msg.data()), error_offset);
  }
  // JIT is an optimisation: when it is unavailable the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  std::shared_ptr<Regex> re(new Regex());
  re->pattern_ = std::string(onig_pattern);
  re->code_ = code;
  return std::shared_ptr<const Regex>(std::move(re));
}

Regex::~Regex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

namespace {

// Per-thread match resources: the JIT's default 32 KB machine stack is too small for long runs
// of whitespace under `\s+(?!\S)`, so each thread gets a growable one.
struct MatchScratch {
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  MatchScratch() {
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (context != nullptr && jit_stack != nullptr) {
      pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

std::atomic<bool> g_warned_match_error{false};

}  // namespace

void Regex::find_all(std::string_view text, std::vector<Span>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  if (md == nullptr) return;
  MatchScratch& ms = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t search_from = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  while (search_from <= text.size()) {
    int rc =
        pcre2_match(code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK, md, ms.context);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // Resource limits of the JIT; the interpreter keeps its frames on the heap.
      rc = pcre2_match(code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       md, ms.context);
    }
    if (rc < 0) {
      if (rc != PCRE2_ERROR_NOMATCH && !g_warned_match_error.exchange(true)) {
        LS_LOG_WARN("tokenizer regex '{}' stopped matching early (PCRE2 error {})", pattern_, rc);
      }
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t s = ov[0];
    const size_t e = ov[1];
    if (s == e && have_last && last_match_end == e) {
      search_from += search_from < text.size()
                         ? utf8_len_of_lead(static_cast<unsigned char>(text[search_from]))
                         : 1;
      continue;
    }
    // \K can report a match that ends before it starts; keep spans well-formed.
    if (e < s || e > text.size()) break;
    search_from = e;
    have_last = true;
    last_match_end = e;
    out.push_back({s, e});
  }
  pcre2_match_data_free(md);
}

}  // namespace ls::tok
