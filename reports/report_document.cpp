#include "reports/report_document.hpp"

#include <string>

namespace attn::report_parts {
namespace {

std::string md_cell(const std::string& text, bool code) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return code && !out.empty() ? "`" + out + "`" : out;
}

std::string md_table(const Table& t) {
  std::string out = "|";
  // Appended piece by piece: " " + std::string&& trips GCC 12's -Wrestrict at -O3 (a false
  // positive, and the release build's only warning).
  for (const auto& h : t.header) out.append(" ").append(md_cell(h, false)).append(" |");
  out += "\n|";
  for (std::size_t i = 0; i < t.header.size(); ++i) out += t.numeric_columns.count(i) ? " ---: |" : " --- |";
  out += "\n";
  for (const auto& row : t.rows) {
    out += "|";
    for (std::size_t i = 0; i < row.size(); ++i) out.append(" ").append(md_cell(row[i], t.code_columns.count(i) > 0)).append(" |");
    out += "\n";
  }
  return out;
}

std::string html_table(const Table& t) {
  std::string out = "<table>\n<thead><tr>";
  for (const auto& h : t.header) out += "<th>" + svg::escape(h) + "</th>";
  out += "</tr></thead>\n<tbody>\n";
  for (const auto& row : t.rows) {
    out += "<tr>";
    for (std::size_t i = 0; i < row.size(); ++i) {
      const std::string cell = svg::escape(row[i]);
      out += t.numeric_columns.count(i) ? "<td class=\"num\">" : "<td>";
      out += t.code_columns.count(i) && !row[i].empty() ? "<code>" + cell + "</code>" : cell;
      out += "</td>";
    }
    out += "</tr>\n";
  }
  return out + "</tbody>\n</table>\n";
}

}  // namespace

std::string render_markdown(const std::string& title, const std::vector<Section>& sections) {
  std::string out = "# " + title + "\n\n";
  for (const auto& s : sections) {
    out += "## " + s.title + "\n\n";
    for (const auto& b : s.blocks) {
      if (const auto* p = std::get_if<Paragraph>(&b)) out += (p->alarm ? "**⚠ " + p->text + "**" : p->text) + "\n\n";
      if (const auto* t = std::get_if<Table>(&b)) out += t->rows.empty() ? "(none)\n\n" : md_table(*t) + "\n";
      if (const auto* d = std::get_if<Details>(&b))
        out += "<details><summary>" + svg::escape(d->summary) + "</summary>\n\n" + md_table(d->table) + "\n</details>\n\n";
    }
  }
  return out;
}

namespace {

// Markdown's `code` spans and **bold** in paragraphs become <code> and <strong> in the HTML;
// everything else is escaped.
std::string html_paragraph(const std::string& text) {
  std::string out;
  bool code = false;
  std::string piece;
  auto flush = [&] {
    out += code ? "<code>" + svg::escape(piece) + "</code>" : svg::escape(piece);
    piece.clear();
  };
  bool strong = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '`') {
      flush();
      code = !code;
    } else if (!code && c == '*' && i + 1 < text.size() && text[i + 1] == '*') {  // **bold**
      flush();
      out += strong ? "</strong>" : "<strong>";
      strong = !strong;
      ++i;
    } else {
      piece += c;
    }
  }
  flush();
  if (strong) out += "</strong>";
  return "<p>" + out + "</p>\n";
}

constexpr const char* css = R"(body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.85em}th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}tbody tr:nth-child(even){background:#fafafa}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.92em;background:#f4f4f4;padding:0 .2em;word-break:break-all}
.charts{display:flex;flex-wrap:wrap;gap:1em}svg.chart{border:1px solid #ddd;max-width:100%;height:auto}
nav ul{columns:2;font-size:.9em}.warn{color:#8a4b00}.fail{color:#b00020;font-weight:bold}details{margin:.5em 0}
)";

}  // namespace

std::string render_html(const std::string& title, const std::vector<Section>& sections) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + svg::escape(title) + "</title>\n<style>\n" + css + "</style>\n</head>\n<body>\n<h1>" + svg::escape(title) + "</h1>\n";
  out += "<nav><ul>\n";
  for (const auto& s : sections) out += "<li><a href=\"#" + s.id + "\">" + svg::escape(s.title) + "</a></li>\n";
  out += "</ul></nav>\n";
  for (const auto& s : sections) {
    out += "<section id=\"" + s.id + "\">\n<h2>" + svg::escape(s.title) + "</h2>\n";
    bool in_charts = false;
    for (const auto& b : s.blocks) {
      const bool chart = std::holds_alternative<Chart>(b);
      if (chart && !in_charts) out += "<div class=\"charts\">\n";
      if (!chart && in_charts) out += "</div>\n";
      in_charts = chart;
      if (const auto* p = std::get_if<Paragraph>(&b)) out += p->alarm ? "<p class=\"fail\">⚠ " + html_paragraph(p->text).substr(3) : html_paragraph(p->text);
      if (const auto* t = std::get_if<Table>(&b)) out += t->rows.empty() ? "<p>(none)</p>\n" : html_table(*t);
      if (const auto* d = std::get_if<Details>(&b))
        out += "<details><summary>" + svg::escape(d->summary) + "</summary>\n" + html_table(d->table) + "</details>\n";
      if (const auto* c = std::get_if<Chart>(&b)) out += svg::render(c->chart);
    }
    if (in_charts) out += "</div>\n";
    out += "</section>\n";
  }
  return out + "</body>\n</html>\n";
}

}  // namespace attn::report_parts
