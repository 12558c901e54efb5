#include "core/score_settings.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn {

nlohmann::json setting_json(const ScoreSetting& setting, const SettingValue& value) {
  return setting.integer ? nlohmann::json(value.integer) : nlohmann::json(value.real);
}

nlohmann::json score_settings_json(const Problem& p) {
  nlohmann::json j = nlohmann::json::object();
  for (const ScoreModificationRow& row : score_modification_rows)
    for (const ScoreSetting& s : row.settings) j[std::string(s.name)] = nullptr;
  for (const NamedSetting& s : score_settings_of(p)) j[std::string(s.setting->name)] = setting_json(*s.setting, s.value);
  return j;
}

SettingValue setting_value_of_json(const ScoreSetting& setting, const nlohmann::json& value, std::string_view where) {
  if (setting.integer) {
    if (!value.is_number_unsigned())
      throw InputError(fmt::format("{}: {} must be an unsigned integer (got {})", where, setting.name, value.dump()));
    const auto n = value.get<std::uint64_t>();
    return {double(n), n};
  }
  if (!value.is_number()) throw InputError(fmt::format("{}: {} must be a number (got {})", where, setting.name, value.dump()));
  return {value.get<double>()};
}

std::vector<NamedSetting> score_settings_in(const nlohmann::json& object, std::string_view where) {
  std::vector<NamedSetting> settings;
  for (const ScoreModificationRow& row : score_modification_rows)
    for (const ScoreSetting& s : row.settings)
      if (object.contains(s.name) && !object.at(std::string(s.name)).is_null())
        settings.push_back({&s, setting_value_of_json(s, object.at(std::string(s.name)), where)});
  return settings;
}

}  // namespace attn
