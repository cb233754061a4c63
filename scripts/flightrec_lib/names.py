"""names: the short function names the reports show by default.

A demangled C++ name can run to hundreds of characters of template
arguments and parameter lists that say nothing a reader needs:

    std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >
        ::_M_create(unsigned long&, unsigned long)          ->  std::string::_M_create
    void std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>(...)
                                                            ->  std::vector::_M_realloc_insert
    (anonymous namespace)::count_primes(unsigned long)      ->  (anon)::count_primes

as `go tool pprof` shortens them: template arguments, parameter lists,
return types, cv/ref qualifiers and ABI tags go; operator names
(`operator<<`, `operator()`, `operator new[]`) and Rust's qualified paths
(`<Vec<T> as Drop>::drop` -> `<Vec as Drop>::drop`) survive. Plain C names
pass through untouched. `--full-names` (set_full) turns shortening off.

Never raises: a name it cannot make sense of is returned as it came.
"""
import functools

# Spelled-out standard typedefs, replaced before template arguments go, so
# `basic_string<char, ...>` reads `string`, not `basic_string`.
_ALIASES = (
    ("std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >", "std::string"),
    ("std::basic_string<char, std::char_traits<char>, std::allocator<char> >", "std::string"),
    ("std::__1::basic_string<char, std::__1::char_traits<char>, std::__1::allocator<char> >", "std::string"),
    ("std::__cxx11::basic_string<wchar_t, std::char_traits<wchar_t>, std::allocator<wchar_t> >", "std::wstring"),
    ("std::basic_string_view<char, std::char_traits<char> >", "std::string_view"),
    ("std::basic_ostream<char, std::char_traits<char> >", "std::ostream"),
    ("std::basic_istream<char, std::char_traits<char> >", "std::istream"),
    ("std::__cxx11::basic_ostringstream<char, std::char_traits<char>, std::allocator<char> >",
     "std::ostringstream"),
    ("std::__cxx11::", "std::"),   # libstdc++'s inline namespace for the new ABI
    ("std::__1::", "std::"),       # libc++'s
)
_ANON = ("(anonymous namespace)", "{anonymous}")
_ANON_MARK = "\x00anon\x00"  # stands in for "(anon)" while parentheses are being dropped
_AS_MARK = "\x00as\x00"      # " as " of a Rust qualified path, kept whole when words are split

# Symbols that can follow the keyword `operator`, longest first.
_OPERATOR_SYMBOLS = sorted("""<=> <<= >>= ->* -> () [] << >> <= >= == != && || ++ -- += -= *= /= %= &= |= ^=
                              + - * / % ^ & | ~ ! = < > ,""".split(), key=len, reverse=True)
_QUALIFIERS = ("const", "volatile", "&", "&&", "noexcept")
_OPEN = {"<": ">", "(": ")", "[": "]"}

_full = False


def set_full(value):
    """--full-names: show every name exactly as demangled."""
    global _full
    _full = bool(value)


def display(name):
    """The name as reports show it: short unless --full-names."""
    if _full or not name:
        return name
    return simplify(name)


@functools.lru_cache(maxsize=65536)
def simplify(name):
    """The short form of a demangled function name (see the module doc)."""
    if not name or not any(c in name for c in "<([ "):
        return name  # a C name, or already short
    try:
        short = _simplify(name).replace(_ANON_MARK, "(anon)").replace(_AS_MARK, " as ")
    except (IndexError, ValueError):
        return name
    return short or name


def _simplify(name):
    text = name
    for long, short in _ALIASES:
        if long in text:
            text = text.replace(long, short)
    for anon in _ANON:
        text = text.replace(anon, _ANON_MARK)
    out, had_params = _strip_nested(text)
    words = out.split()
    if not had_params:
        # No parameter list: not a demangled C++ function (a JIT's perf-map
        # name "JS:*handle /srv/app.js:12", "sub_4010 (prog)"): keep every word.
        return " ".join(words)
    # What is left is e.g. "void std::vector::_M_realloc_insert" or
    # "foo::bar const": drop qualifiers at the end and the return type in front.
    while len(words) > 1 and words[-1] in _QUALIFIERS:
        words.pop()
    # "operator new", "Foo::operator bool": the keyword and what follows stay together.
    cut = len(words) - 1
    for i in range(len(words) - 1, -1, -1):
        if words[i] == "operator" or words[i].endswith("::operator"):
            cut = i
            break
    return " ".join(words[cut:])


def _follows_name(out):
    """True where a bracket directly follows a name (foo<, foo(, >(, )( ...):
    template arguments, a parameter list or an ABI tag. A bracket after a
    space, '.', '*' or at the start belongs to some other notation (Go's
    main.(*T).M, "sub_4010 (prog)", "JS:*<anonymous>") and is kept."""
    prev = out[-1][-1:] if out else ""
    return prev.isalnum() or prev in "_>)]}"


def _strip_nested(text):
    """(text without <...>, (...) and [...] groups that follow a name, whether
    a parameter list was among them). Operator symbols, Rust's leading
    <A as B> qualified paths (shortened inside) and " [clone .cold]" tails
    are handled on the way."""
    out = []
    had_params = False
    after_operator = -1  # len(out) right after an operator symbol: "operator< <int>(...)"
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("operator", i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            j = i + len("operator")
            if j < n and (text[j].isalnum() or text[j] == "_"):  # an identifier like operator_x
                out.append(text[i:j])
                i = j
                continue
            out.append("operator")
            k = j
            while k < n and text[k] == " ":
                k += 1
            for sym in _OPERATOR_SYMBOLS:
                if text.startswith(sym, k):
                    out.append(sym)
                    i = k + len(sym)
                    after_operator = len(out)
                    break
            else:
                # operator new / delete (maybe []), or a conversion operator.
                if k > j:
                    out.append(" ")
                i = k
                if text.startswith("new[]", k) or text.startswith("delete[]", k):
                    word = text[k:text.index("]", k) + 1]
                    out.append(word)
                    i = k + len(word)
            continue
        if c == "<" and _at_path_start(out):
            end = _matching(text, i)
            inner = text[i + 1:end]
            parts = _split_as(inner)
            out.append("<" + _AS_MARK.join(_simplify(p).strip() for p in parts) + ">")
            i = end + 1
            continue
        if c in _OPEN:
            end = _matching(text, i)
            after_symbol = after_operator >= 0 and "".join(out[after_operator:]).strip() == ""
            if _follows_name(out) or after_symbol or text.startswith("[clone ", i):
                had_params = had_params or c == "("
            else:
                out.append(text[i:end + 1])  # not C++ notation: keep it as it is
            i = end + 1
            continue
        if c == "{":  # a lambda or unnamed type: {lambda(int)#1} -> {lambda#1}
            end = _matching(text, i, "{", "}")
            out.append("{" + _strip_nested(text[i + 1:end])[0] + "}")
            i = end + 1
            continue
        out.append(c)
        i += 1
    return "".join(out), had_params


def _at_path_start(out):
    """A '<' opens a Rust qualified path (`<A as B>::c`) only where a name
    starts; anywhere else it opens template (or turbofish) arguments."""
    return not "".join(out).strip()


def _split_as(inner):
    """'A as B' split at its outermost ' as ' (A may itself hold '<X as Y>')."""
    depth = 0
    for j, ch in enumerate(inner):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0 and inner.startswith(" as ", j):
            return [inner[:j], inner[j + 4:]]
    return [inner]


def _matching(text, i, open_c=None, close_c=None):
    """Index of the bracket closing the one at text[i] (the end of text if none)."""
    open_c = open_c or text[i]
    close_c = close_c or _OPEN[open_c]
    depth = 0
    for j in range(i, len(text)):
        ch = text[j]
        if ch == open_c:
            depth += 1
        elif ch == close_c:
            # "->" inside a parameter list is not a closing bracket.
            if ch == ">" and j > 0 and text[j - 1] == "-":
                continue
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1
