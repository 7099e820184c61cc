// Core-internal helpers shared by config.cpp, loader.cpp, registry.cpp and runtime.cpp.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace plugflow {
struct Config;
}

namespace plugflow::internal {

// How messages name the compiled-in default config.
inline constexpr const char* kDefaultConfigSource = "<default cpu.yaml>";

// "~" and "~/x" -> $HOME/x, "~user/x" -> that user's home; anything else unchanged.
std::string expand_user(const std::string& path);

// The candidate closest to `word` when it is close enough to be a plausible typo (for
// "did you mean" hints).
std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates);

// The name a plugin entry of a config stands for: "cpu" for "cpu", "vendor" for
// ".../libplugflow_vendor.so". The plugin itself declares its provider name, which may differ.
std::string plugin_name_of(const std::string& name_or_path);

// Throws the ConfigError of a value the config's key holds: "file:line: key 'k': problem",
// with the line where the file sets the key (Config::lines).
[[noreturn]] void config_key_error(const Config& config, const std::string& key, const std::string& problem);

}  // namespace plugflow::internal
