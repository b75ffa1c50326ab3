#include "kiln/training/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file.h"

namespace kiln::training {

namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fmt(double v, const char* spec = "%.2f") {
  char buf[64];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}

// Tick label: plain decimals, or scientific for a whole axis whose ticks are tiny or huge (so one
// axis never mixes 0.001 with 5e-04).
bool axis_is_scientific(const std::vector<double>& ticks) {
  double mx = 0;
  for (double t : ticks) mx = std::max(mx, std::fabs(t));
  return mx > 0 && (mx < 1e-2 || mx >= 1e6);
}

std::string tick_label(double v, double step, bool scientific) {
  if (v == 0) return "0";
  if (scientific) {
    std::string s = fmt(v, "%.1e");
    if (s.find(".0e") != std::string::npos) s.erase(s.find(".0e"), 2);  // 2.0e-04 -> 2e-04
    return s;
  }
  int decimals = std::max(0, int(std::ceil(-std::log10(step) - 1e-9)));
  return fmt(v, ("%." + std::to_string(std::min(decimals, 6)) + "f").c_str());
}

struct Range {
  double lo, hi;
};

Range padded_range(double lo, double hi) {
  if (!(hi > lo)) {
    double d = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
    return {lo - d, hi + d};
  }
  return {lo, hi};
}

struct Panel {
  double x, y, w, h;  // plot area in pixels
  Range xr, yr;
  double px(double v) const { return x + (v - xr.lo) / (xr.hi - xr.lo) * w; }
  double py(double v) const { return y + h - (v - yr.lo) / (yr.hi - yr.lo) * h; }
};

void draw_axes(std::ostringstream& o, const Panel& p, const std::vector<double>& xt,
               const std::vector<double>& yt, const std::string& xlabel,
               const std::string& ylabel) {
  o << "<rect x='" << fmt(p.x) << "' y='" << fmt(p.y) << "' width='" << fmt(p.w) << "' height='"
    << fmt(p.h) << "' fill='white' stroke='#444'/>\n";
  double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  bool xsci = axis_is_scientific(xt), ysci = axis_is_scientific(yt);
  for (double t : xt) {
    double X = p.px(t);
    o << "<line x1='" << fmt(X) << "' y1='" << fmt(p.y) << "' x2='" << fmt(X) << "' y2='"
      << fmt(p.y + p.h) << "' stroke='#e4e4e4'/>\n";
    o << "<line x1='" << fmt(X) << "' y1='" << fmt(p.y + p.h) << "' x2='" << fmt(X) << "' y2='"
      << fmt(p.y + p.h + 5) << "' stroke='#444'/>\n";
    o << "<text x='" << fmt(X) << "' y='" << fmt(p.y + p.h + 18)
      << "' text-anchor='middle'>" << tick_label(t, xstep, xsci) << "</text>\n";
  }
  for (double t : yt) {
    double Y = p.py(t);
    o << "<line x1='" << fmt(p.x) << "' y1='" << fmt(Y) << "' x2='" << fmt(p.x + p.w) << "' y2='"
      << fmt(Y) << "' stroke='#e4e4e4'/>\n";
    o << "<line x1='" << fmt(p.x - 5) << "' y1='" << fmt(Y) << "' x2='" << fmt(p.x) << "' y2='"
      << fmt(Y) << "' stroke='#444'/>\n";
    o << "<text x='" << fmt(p.x - 8) << "' y='" << fmt(Y + 4) << "' text-anchor='end'>"
      << tick_label(t, ystep, ysci) << "</text>\n";
  }
  o << "<text x='" << fmt(p.x + p.w / 2) << "' y='" << fmt(p.y + p.h + 38)
    << "' text-anchor='middle'>" << xml_escape(xlabel) << "</text>\n";
  o << "<text transform='translate(" << fmt(p.x - 62) << "," << fmt(p.y + p.h / 2)
    << ") rotate(-90)' text-anchor='middle'>" << xml_escape(ylabel) << "</text>\n";
}

void draw_line(std::ostringstream& o, const Panel& p,
               const std::vector<std::pair<double, double>>& pts, const char* color) {
  if (pts.empty()) return;
  if (pts.size() == 1) {
    o << "<circle cx='" << fmt(p.px(pts[0].first)) << "' cy='" << fmt(p.py(pts[0].second))
      << "' r='3' fill='" << color << "'/>\n";
    return;
  }
  o << "<polyline fill='none' stroke='" << color << "' stroke-width='1.8' points='";
  for (const auto& [x, y] : pts) o << fmt(p.px(x)) << "," << fmt(p.py(y)) << " ";
  o << "'/>\n";
}

void draw_dots(std::ostringstream& o, const Panel& p,
               const std::vector<std::pair<double, double>>& pts, const char* color) {
  for (const auto& [x, y] : pts)
    o << "<circle cx='" << fmt(p.px(x)) << "' cy='" << fmt(p.py(y)) << "' r='3.5' fill='" << color
      << "'/>\n";
}

Range value_range(std::initializer_list<const std::vector<std::pair<double, double>>*> series,
                  bool x_axis) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto* s : series)
    for (const auto& pt : *s) {
      double v = x_axis ? pt.first : pt.second;
      if (!std::isfinite(v)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  if (!std::isfinite(lo)) return {0, 1};
  return padded_range(lo, hi);
}

// Widens a range to the outer nice ticks so lines never touch the frame unexpectedly.
Range snap(Range r, const std::vector<double>& ticks) {
  double step = ticks.size() > 1 ? ticks[1] - ticks[0] : (r.hi - r.lo);
  return {std::min(r.lo, std::floor(r.lo / step + 1e-9) * step),
          std::max(r.hi, std::ceil(r.hi / step - 1e-9) * step)};
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target_count) {
  Range r = padded_range(lo, hi);
  double raw = (r.hi - r.lo) / std::max(1, target_count);
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double norm = raw / mag;
  double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  std::vector<double> ticks;
  for (double t = std::ceil(r.lo / step - 1e-9) * step; t <= r.hi + step * 1e-9; t += step)
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

TrainingCurves curves_from_log_history(const io::Json& entries) {
  TrainingCurves c;
  for (const auto& e : entries) {
    if (!e.is_object() || !e.contains("step") || !e["step"].is_number()) continue;
    double step = e["step"].get<double>();
    auto take = [&](const char* key, std::vector<std::pair<double, double>>& out) {
      if (e.contains(key) && e[key].is_number()) out.emplace_back(step, e[key].get<double>());
    };
    take("loss", c.loss);
    take("eval_loss", c.eval_loss);
    take("learning_rate", c.learning_rate);
  }
  return c;
}

TrainingCurves read_training_curves(const std::string& path) {
  std::string text = io::read_file(path);
  io::Json whole = io::Json::parse(text, nullptr, /*allow_exceptions=*/false);
  TrainingCurves c;
  if (!whole.is_discarded() && whole.is_object() && whole.contains("log_history")) {
    if (!whole["log_history"].is_array()) throw Error(path + ": log_history", "not an array");
    c = curves_from_log_history(whole["log_history"]);
  } else {
    io::Json entries = io::Json::array();
    std::istringstream in(text);
    std::string line;
    int64_t lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      io::Json j = io::Json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        throw Error(path + ":" + std::to_string(lineno),
                    "not a JSON object (expected train_log.jsonl or trainer_state.json)");
      entries.push_back(std::move(j));
    }
    c = curves_from_log_history(entries);
  }
  if (c.loss.empty() && c.eval_loss.empty() && c.learning_rate.empty())
    throw Error(path, "no loss, eval_loss or learning_rate entries to plot");
  return c;
}

std::string render_training_svg(const TrainingCurves& c, const std::string& title) {
  const double W = 900, H = 640, left = 90, right = 30;
  std::ostringstream o;
  o << "<?xml version='1.0' encoding='UTF-8'?>\n"
    << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' viewBox='0 0 " << W << " " << H << "' font-family='sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='#fafafa'/>\n"
    << "<text x='" << W / 2 << "' y='24' text-anchor='middle' font-size='16'>" << xml_escape(title)
    << "</text>\n";
  Range xr = value_range({&c.loss, &c.eval_loss, &c.learning_rate}, true);
  std::vector<double> xt = nice_ticks(xr.lo, xr.hi, 8);
  xr = snap(xr, xt);
  xt = nice_ticks(xr.lo, xr.hi, 8);

  Panel top{left, 50, W - left - right, 300, xr, value_range({&c.loss, &c.eval_loss}, false)};
  std::vector<double> yt = nice_ticks(top.yr.lo, top.yr.hi);
  top.yr = snap(top.yr, yt);
  yt = nice_ticks(top.yr.lo, top.yr.hi);
  draw_axes(o, top, xt, yt, "", "loss");
  draw_line(o, top, c.loss, "#1f77b4");
  draw_dots(o, top, c.eval_loss, "#ff7f0e");
  // Legend.
  double lx = top.x + top.w - 150, ly = top.y + 16;
  o << "<line x1='" << lx << "' y1='" << ly - 4 << "' x2='" << lx + 24 << "' y2='" << ly - 4
    << "' stroke='#1f77b4' stroke-width='2'/><text x='" << lx + 30 << "' y='" << ly
    << "'>train loss</text>\n";
  if (!c.eval_loss.empty())
    o << "<circle cx='" << lx + 12 << "' cy='" << ly + 14 << "' r='3.5' fill='#ff7f0e'/><text x='"
      << lx + 30 << "' y='" << ly + 18 << "'>eval loss</text>\n";

  Panel bottom{left, 420, W - left - right, 160, xr, value_range({&c.learning_rate}, false)};
  if (bottom.yr.lo > 0) bottom.yr.lo = 0;  // learning rates read best from zero
  std::vector<double> lt = nice_ticks(bottom.yr.lo, bottom.yr.hi, 4);
  bottom.yr = snap(bottom.yr, lt);
  lt = nice_ticks(bottom.yr.lo, bottom.yr.hi, 4);
  draw_axes(o, bottom, xt, lt, "step", "learning rate");
  draw_line(o, bottom, c.learning_rate, "#2ca02c");
  o << "</svg>\n";
  return o.str();
}

void plot_training_log(const std::string& log_path, const std::string& svg_path) {
  TrainingCurves c = read_training_curves(log_path);
  std::string title = "Training curves: " + std::filesystem::path(log_path).filename().string();
  io::write_file_atomic(svg_path, render_training_svg(c, title));
}

}  // namespace kiln::training
