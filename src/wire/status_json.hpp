// Renders the server's StatusReply and DescribeReply as JSON. One renderer
// for every reader of the status: th_status_json, the tensorhub CLI and the
// server's /api/status (its live page).
#pragma once

#include <string>

#include "wire/wire.hpp"

namespace th {

std::string status_to_json(const wire::StatusReply &s);
std::string describe_to_json(const std::string &model, uint32_t shard, const wire::DescribeReply &d);

}  // namespace th
