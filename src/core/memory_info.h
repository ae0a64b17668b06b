// What the machine offers: memory available to this process now. The one reader of
// /proc/meminfo (the KV cache sizing and the KV storage's check both come here).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda {

// `field` ("MemAvailable", "MemTotal", ...) of a /proc/meminfo-format file, in bytes (the
// file gives "<field>: <n> kB"). Throws pagoda::Error (kNotFound) "<path>: cannot open"
// when the file cannot be read, "<path>: no readable <field> line" when the field is
// missing or not "<n> kB".
int64_t ReadMeminfoBytes(std::string_view field, const std::string& path = "/proc/meminfo");

// MemAvailable from /proc/meminfo in bytes; 0 when it cannot be read.
int64_t AvailableMemoryBytes();
// MemTotal from /proc/meminfo in bytes; 0 when it cannot be read.
int64_t TotalMemoryBytes();

}  // namespace pagoda
