#pragma once
// The files report/CMakeLists.txt compiles into ktune_report (report/embed_assets.cmake writes
// them as byte arrays into the build tree): the minified Chart.js bundle and the page template.
// The arrays hold exactly the files' bytes; they are not NUL-terminated.
#include <cstddef>

namespace ktune::report::assets {

extern const unsigned char k_chart_js[];
extern const std::size_t k_chart_js_size;
extern const char k_chart_js_version[];   // "4.5.1"

extern const unsigned char k_template[];
extern const std::size_t k_template_size;

} // namespace ktune::report::assets
