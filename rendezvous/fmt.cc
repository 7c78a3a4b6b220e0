// fmt's compiled part (Debian ships fmt 9 as a shared library and headers, no static library):
// compiled once here, in the rendezvous library that every mlrun target links, instead of in
// every translation unit as fmt's header-only mode has it. Header-only made each of ~140
// translation units generate fmt's whole formatting engine (a third of a typical unit's compile
// time); a shared libfmt is one more library for every mlrun process to load at start-up
// (docs/packaging.md). format-inl.h defines the non-template functions; the templates format.h
// declares and leaves to the library are instantiated below.
#include <fmt/format-inl.h>

#if FMT_VERSION < 90000 || FMT_VERSION >= 100000
#error "rendezvous/fmt.cc instantiates what fmt 9's format.h declares: check it against this fmt"
#endif

FMT_BEGIN_NAMESPACE
namespace detail {

template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;

template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;

template FMT_API void buffer<char>::append(const char*, const char*);
template FMT_API void buffer<wchar_t>::append(const wchar_t*, const wchar_t*);

}  // namespace detail
FMT_END_NAMESPACE
