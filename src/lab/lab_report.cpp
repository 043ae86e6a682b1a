#include "lab/lab_report.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"
#include "plan/comm_model.hpp"

namespace tandem::lab {
namespace {

plan::Layout layoutOf(const LabSetup& s) {
  if (s.servers == 0) return {s.hierarchical ? plan::Algorithm::kHierAllReduce : plan::Algorithm::kRingAllReduce, 0};
  if (s.hierarchical) {
    return {s.dedicated_servers ? plan::Algorithm::kHierPsDedicated : plan::Algorithm::kHierPsColocated, s.servers};
  }
  return {s.dedicated_servers ? plan::Algorithm::kPsDedicated : plan::Algorithm::kPsColocated, s.servers};
}

}  // namespace

nlohmann::json labReport(const LabSetup& setup, const std::vector<WorkerResult>& workers,
                         const std::vector<LinkCounters>& links_begin, const std::vector<LinkCounters>& links_end) {
  if (workers.empty()) throw Error("a lab report needs at least one worker");
  const double d = setup.dilation;
  nlohmann::json tasks = nlohmann::json::array();
  double samples_per_s = 0;
  for (const auto& w : workers) {
    const double step = w.window.stepSeconds() / d;
    samples_per_s += step > 0 ? static_cast<double>(w.samples_per_step) / step : 0;
    nlohmann::json breakdown = nlohmann::json::object();
    for (const auto& [phase, seconds] : w.window.breakdown.items()) breakdown[phase] = seconds.get<double>() / d * 1e3;
    tasks.push_back({{"task", w.name}, {"steps", w.window.steps}, {"step_ms", step * 1e3},
                     {"breakdown_ms", breakdown}});
  }
  const StepWindow& chief = workers.front().window;
  const double chief_step = chief.stepSeconds() / d;
  const double window_s = (chief.end_time - chief.begin_time) / d;

  plan::Workload work{setup.forward_s, setup.backward_s, setup.model_bytes, workers.front().samples_per_step};
  plan::Cluster cluster{setup.worker_hosts, setup.workers_per_host, setup.link_bits_per_s / 8, 0};
  const plan::Layout layout = layoutOf(setup);
  // DiLoCo: the exchange alone, once per local_steps steps of compute.
  const bool diloco = setup.local_steps > 1;
  plan::Workload exchanged = work;
  if (diloco) exchanged.forward_s = exchanged.backward_s = 0;
  plan::Prediction optimum = plan::predict(exchanged, cluster, layout);
  const bool asynchronous = setup.mode == Mode::PsAsync || setup.mode == Mode::Ssp;
  plan::Prediction predicted =
      plan::predictTandem(exchanged, cluster, layout,
                          {setup.group_bytes, setup.apply_bytes_per_s, setup.message_s, asynchronous,
                           setup.priority && setup.mode == Mode::PsSync});
  if (diloco) {
    optimum = plan::withLocalSteps(optimum, work, cluster, setup.local_steps, setup.fragments, setup.fragment_delay);
    predicted =
        plan::withLocalSteps(predicted, work, cluster, setup.local_steps, setup.fragments, setup.fragment_delay);
  }
  // The emulated GPU's busy share of a step: forward+backward over the step.
  double busy = 0;
  for (const auto& w : workers) {
    const double step = w.window.stepSeconds();
    if (step > 0) busy += w.window.breakdown.value("forward_backward", 0.0) / step;
  }
  const double compute_utilisation = workers.empty() ? 0 : busy / static_cast<double>(workers.size());
  // The optimum again, with the next forward overlapping the exchange too.
  const double overlapped_samples_per_s =
      optimum.overlapped_step_s > 0 ? optimum.samples_per_s * optimum.step_s / optimum.overlapped_step_s : 0;
  // What the algorithm Tandem ran moves (for a flat all-reduce, Gloo's
  // choice by bucket size); the optimum's bytes are a lower bound.
  const double expected_worker_link = predicted.load.worker_host_bytes;

  nlohmann::json links = nlohmann::json::array();
  double busiest_worker_link = 0;
  for (size_t h = 0; h < links_end.size(); ++h) {
    const double sent = static_cast<double>(links_end[h].sent_bytes - links_begin.at(h).sent_bytes);
    const double received = static_cast<double>(links_end[h].received_bytes - links_begin.at(h).received_bytes);
    const double per_step_sent = chief.steps > 0 ? sent / static_cast<double>(chief.steps) : 0;
    const double per_step_received = chief.steps > 0 ? received / static_cast<double>(chief.steps) : 0;
    const bool worker_host = static_cast<int>(h) < setup.worker_hosts;
    if (worker_host) busiest_worker_link = std::max({busiest_worker_link, per_step_sent, per_step_received});
    links.push_back({{"host", h}, {"role", worker_host ? "workers" : "servers"},
                     {"sent_bytes_per_step", per_step_sent}, {"received_bytes_per_step", per_step_received},
                     {"sent_mbit_per_s", window_s > 0 ? sent * 8 / window_s / 1e6 : 0},
                     {"received_mbit_per_s", window_s > 0 ? received * 8 / window_s / 1e6 : 0}});
  }
  // How busy the busiest worker link was: its wire bytes (headers, acks and
  // retransmissions included) at the link rate, over the step. With the
  // optimum's share of those bytes, this says where a link-bound step went.
  const double link_busy =
      chief_step > 0 ? busiest_worker_link * 8 / (setup.link_bits_per_s * chief_step) : 0;
  const double optimum_share = busiest_worker_link > 0 ? optimum.load.worker_host_bytes / busiest_worker_link : 0;
  return {
      {"cluster",
       {{"worker_hosts", setup.worker_hosts}, {"workers_per_host", setup.workers_per_host},
        {"servers", setup.servers}, {"server_placement", setup.dedicated_servers ? "dedicated" : "colocated"},
        {"link_mbit_per_s", setup.link_bits_per_s / 1e6}, {"dilation", d}, {"mode", std::string(modeName(setup.mode))},
        {"layout", plan::algorithmName(layout.algorithm)},
        {"model_bytes", setup.model_bytes}, {"group_bytes", setup.group_bytes},
        {"message_us", setup.message_s * 1e6}, {"apply_gb_per_s", setup.apply_bytes_per_s / 1e9},
        {"forward_ms", setup.forward_s * 1e3}, {"backward_ms", setup.backward_s * 1e3},
        {"priority", setup.priority}, {"local_steps", setup.local_steps},
                  {"fragments", setup.fragments}, {"fragment_delay", setup.fragment_delay}}},
      {"tasks", tasks},
      {"links", links},
      {"measured", {{"step_ms", chief_step * 1e3}, {"samples_per_sec", samples_per_s},
                    {"busiest_worker_link_bytes_per_step", busiest_worker_link},
                    {"busiest_worker_link_busy", link_busy},
                    {"compute_utilisation", compute_utilisation}}},
      {"optimum", {{"step_ms", optimum.step_s * 1e3}, {"samples_per_sec", optimum.samples_per_s},
                   {"worker_link_bytes_per_step", optimum.load.worker_host_bytes}, {"bottleneck", optimum.bottleneck},
                   {"overlapped_step_ms", optimum.overlapped_step_s * 1e3},
                   {"overlapped_samples_per_sec", overlapped_samples_per_s},
                   {"compute_utilisation", optimum.efficiency}}},
      {"predicted", {{"step_ms", predicted.step_s * 1e3}, {"samples_per_sec", predicted.samples_per_s},
                     {"worker_link_bytes_per_step", expected_worker_link},
                     {"bottleneck", predicted.bottleneck}, {"compute_utilisation", predicted.efficiency}}},
      // Steps compare worker 0; "time" compares the job's time per sample
      // (the inverse of samples/s), which is what counts when async workers
      // step at different rates.
      {"ratios",
       {{"optimum_over_measured_step", chief_step > 0 ? optimum.step_s / chief_step : 0},
        {"measured_over_predicted_step", predicted.step_s > 0 ? chief_step / predicted.step_s : 0},
        {"measured_over_optimum_samples", optimum.samples_per_s > 0 ? samples_per_s / optimum.samples_per_s : 0},
        {"measured_over_overlapped_optimum_samples",
         overlapped_samples_per_s > 0 ? samples_per_s / overlapped_samples_per_s : 0},
        {"measured_over_predicted_time",
         samples_per_s > 0 ? predicted.samples_per_s / samples_per_s : 0},
        {"link_bytes_over_algorithm", expected_worker_link > 0 ? busiest_worker_link / expected_worker_link : 0},
        {"optimum_bytes_over_link_bytes", optimum_share}}}};
}

std::string labTable(const nlohmann::json& r) {
  const auto& c = r["cluster"];
  std::string out = fmt::format(
      "lab: {} host(s) x {} worker(s), {}{}, {:g} Mbit/s links, dilation {:g}\n", c["worker_hosts"].get<int>(),
      c["workers_per_host"].get<int>(), c["mode"].get<std::string>(),
      c["servers"].get<int>() > 0
          ? fmt::format(", {} server(s) {}", c["servers"].get<int>(), c["server_placement"].get<std::string>())
          : "",
      c["link_mbit_per_s"].get<double>(), c["dilation"].get<double>());
  out += fmt::format("{:<10} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "task", "steps", "step ms", "input",
                     "fwd+bwd", "exp.comm", "wait", "update");
  for (const auto& t : r["tasks"]) {
    const auto& b = t["breakdown_ms"];
    out += fmt::format("{:<10} {:>6} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f}\n",
                       t["task"].get<std::string>(), t["steps"].get<int64_t>(), t["step_ms"].get<double>(),
                       b.value("input_wait", 0.0), b.value("forward_backward", 0.0), b.value("exposed_comm", 0.0),
                       b.value("wait_workers", 0.0), b.value("update", 0.0));
  }
  // Packets the links' queues dropped over the whole run (lab runs only):
  // each forces a retransmission, and a link idles meanwhile.
  const bool drops = !r["links"].empty() && r["links"][0].contains("run_dropped_packets_sent");
  out += fmt::format("{:<6} {:<8} {:>14} {:>14} {:>12} {:>12}{}\n", "host", "role", "sent MB/step", "recv MB/step",
                     "sent Mbit/s", "recv Mbit/s", drops ? "   drops sent/recv (run)" : "");
  for (const auto& l : r["links"]) {
    out += fmt::format("{:<6} {:<8} {:>14.3f} {:>14.3f} {:>12.1f} {:>12.1f}", l["host"].get<int>(),
                       l["role"].get<std::string>(), l["sent_bytes_per_step"].get<double>() / 1e6,
                       l["received_bytes_per_step"].get<double>() / 1e6, l["sent_mbit_per_s"].get<double>(),
                       l["received_mbit_per_s"].get<double>());
    if (drops) {
      out += fmt::format("   {}/{}", l.value("run_dropped_packets_sent", uint64_t{0}),
                         l.value("run_dropped_packets_received", uint64_t{0}));
    }
    out += "\n";
  }
  const auto& m = r["measured"];
  const auto& ratios = r["ratios"];
  out += fmt::format("step: measured {:.1f} ms, predicted {:.1f} ms (measured/predicted {:.3f}), comm-bound optimum "
                     "{:.1f} ms (optimum/measured {:.3f}, bound by {})\n",
                     m["step_ms"].get<double>(), r["predicted"]["step_ms"].get<double>(),
                     ratios["measured_over_predicted_step"].get<double>(), r["optimum"]["step_ms"].get<double>(),
                     ratios["optimum_over_measured_step"].get<double>(), r["optimum"]["bottleneck"].get<std::string>());
  out += fmt::format("compute: {:.3f} of each step forward+backward, predicted {:.3f}, optimum {:.3f}{}\n",
                     m.value("compute_utilisation", 0.0), r["predicted"].value("compute_utilisation", 0.0),
                     r["optimum"].value("compute_utilisation", 0.0),
                     r["cluster"].value("local_steps", 1) > 1
                         ? fmt::format(" (one exchange per {} steps{})", r["cluster"]["local_steps"].get<int64_t>(),
                                       r["cluster"].value("fragments", 1) > 1
                                           ? fmt::format(", in {} fragments, each overlapping {} step(s)",
                                                         r["cluster"]["fragments"].get<int64_t>(),
                                                         r["cluster"].value("fragment_delay", 0))
                                           : "")
                         : "");
  out += fmt::format("busiest worker link: {:.3f} MB/step measured, {:.3f} MB/step by the algorithm's count ({:.3f})\n",
                     m["busiest_worker_link_bytes_per_step"].get<double>() / 1e6,
                     r["predicted"]["worker_link_bytes_per_step"].get<double>() / 1e6,
                     ratios["link_bytes_over_algorithm"].get<double>());
  // optimum/measured = forward/step + busy x share when the worker links
  // bind (the optimum is forward + its bytes at the link rate).
  if (r["optimum"]["bottleneck"] == "worker links" && m["step_ms"].get<double>() > 0) {
    out += fmt::format(
        "where it went: that link sent {:.1f}% of the step, {:.1f}% of it the optimum's bytes (the rest: "
        "headers, acks, retransmissions, control); the forward the optimum does not overlap is {:.1f}%\n",
        100 * m["busiest_worker_link_busy"].get<double>(), 100 * ratios["optimum_bytes_over_link_bytes"].get<double>(),
        100 * r["cluster"]["forward_ms"].get<double>() / m["step_ms"].get<double>());
  }
  out += fmt::format("job: {:.1f} samples/s measured, {:.1f} predicted (time per sample measured/predicted {:.3f}), "
                     "{:.1f} at the optimum ({:.3f} of it)\n",
                     m["samples_per_sec"].get<double>(), r["predicted"]["samples_per_sec"].get<double>(),
                     ratios["measured_over_predicted_time"].get<double>(), r["optimum"]["samples_per_sec"].get<double>(),
                     ratios["measured_over_optimum_samples"].get<double>());
  out += fmt::format("with the next forward overlapped too (priority scheduling's bound): {:.1f} ms, {:.1f} "
                     "samples/s ({:.3f} of it)\n",
                     r["optimum"]["overlapped_step_ms"].get<double>(),
                     r["optimum"]["overlapped_samples_per_sec"].get<double>(),
                     ratios["measured_over_overlapped_optimum_samples"].get<double>());
  return out;
}

}  // namespace tandem::lab
