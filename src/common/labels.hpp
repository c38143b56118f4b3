// Topology labels of a worker: "dc=eu,rack=r7,host=node12".
#pragma once

#include <functional>
#include <map>
#include <string>

namespace th {

// Transparent: the policy looks keys up by literal on every plan, for every
// holder, without building a string each time.
using Labels = std::map<std::string, std::string, std::less<>>;

// Parses "k=v,k=v"; throws Error(TH_ERR_INVALID_ARG) on a malformed entry.
Labels parse_labels(const std::string &text);
std::string format_labels(const Labels &labels);

}  // namespace th
