#pragma once
// The score modifications' settings (core/score_pipeline.hpp, ScoreSetting) as JSON, for the
// carriers that write or read them by name: the case manifests, settings.json, the plugin worker's
// call description. Nothing here knows one modification from another.
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/score_pipeline.hpp"

namespace attn {

// A setting's value as JSON: an unsigned integer for an integer setting, else a number.
nlohmann::json setting_json(const ScoreSetting& setting, const SettingValue& value);
// Every setting of every modification by name: its value where the problem uses the
// modification, null where not (a manifest's entry says each, so a reader needs no default).
nlohmann::json score_settings_json(const Problem& p);
// A JSON value as the setting's (`where` names the file or argument): a number, an unsigned
// integer for an integer setting. Throws InputError naming `where` and the setting.
SettingValue setting_value_of_json(const ScoreSetting& setting, const nlohmann::json& value, std::string_view where);
// The settings an object names (every key that is a setting's name, null ones left out), read.
std::vector<NamedSetting> score_settings_in(const nlohmann::json& object, std::string_view where);

}  // namespace attn
