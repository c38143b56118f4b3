// A simulated update as JSON: its setup and what it measured.
#pragma once

#include <nlohmann/json.hpp>

#include "cluster.hpp"

namespace th::sim {

nlohmann::json to_json(const Setup &s);
nlohmann::json to_json(const Result &r);

}  // namespace th::sim
