// The live page (src/server/page/index.html), embedded at build time: plain
// HTML/JS/SVG that polls /api/status, with no external resources.
#pragma once

namespace th {

extern const char *const kLivePage;

}  // namespace th
