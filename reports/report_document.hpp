#pragma once
// The report's small document model (sections of paragraphs, tables, collapsible tables and SVG
// charts) and its two renderings: Markdown (charts left out) and one self-contained HTML page.
// Every text from a result file is escaped in both.
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "reports/svg_chart.hpp"

namespace attn::report_parts {

struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::set<std::size_t> code_columns;  // shown as code (repro strings, commands)
  std::set<std::size_t> numeric_columns;
};
struct Paragraph {
  std::string text;
  bool alarm = false;  // shown in red (HTML) and marked (Markdown): what makes the whole report untrustworthy
};
struct Details {  // a collapsible table (Markdown: <details>, which GitHub renders)
  std::string summary;
  Table table;
};
struct Chart {  // HTML only
  svg::Chart chart;
};
using Block = std::variant<Paragraph, Table, Details, Chart>;

struct Section {
  std::string id, title;
  std::vector<Block> blocks;
};

std::string render_markdown(const std::string& title, const std::vector<Section>& sections);
std::string render_html(const std::string& title, const std::vector<Section>& sections);

}  // namespace attn::report_parts
