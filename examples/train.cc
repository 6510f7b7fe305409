// dtl_train: the two training examples of the nn core, single process.
//
//   dtl_train mlp [options]   an MLP on the generated spirals (dtl::data)
//   dtl_train gpt [options]   a tiny GPT on generated English-like text
//
// What this file teaches: the whole training loop with nothing hidden —
// sample a batch, zero the gradients, forward, loss, backward, optimizer step
// over the flat buffers — plus the numbers worth watching: loss, accuracy,
// time per step, and peak memory by category. Labs 04-07 distribute exactly
// this loop.
//
// --device cuda runs the same loop on the GPU: the model, its gradients and
// AdamW's state live there (Model::to, AdamW(..., Device::kCuda)), each batch is
// sampled on the host and copied up, and the loss is the one number per step
// that comes back (harness/nn/README.md, section 7).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "datasets/datasets.h"
#include "harness/nn/gemm.h"
#include "harness/nn/model.h"
#include "harness/nn/optim.h"

#ifdef DTL_HAVE_CUDA
#include "harness/cuda/device.h"
#endif

namespace {

using dtl::nn::Device;
using dtl::nn::DType;
using dtl::nn::MemoryCategory;
using dtl::nn::Tensor;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// --------------------------------------------------------------------------
// Options: --name value pairs with defaults.
// --------------------------------------------------------------------------
class Options {
 public:
  Options(int argc, char** argv, int first, std::map<std::string, std::string> defaults)
      : values_(std::move(defaults)) {
    for (int i = first; i < argc; ++i) {
      std::string key = argv[i];
      if (key.rfind("--", 0) != 0 || i + 1 >= argc || !values_.count(key.substr(2))) {
        throw std::runtime_error("unknown or incomplete option '" + key + "' (see --help)");
      }
      values_[key.substr(2)] = argv[++i];
    }
  }
  long long integer(const std::string& key) const { return std::stoll(values_.at(key)); }
  const std::string& text(const std::string& key) const { return values_.at(key); }
  double real(const std::string& key) const { return std::stod(values_.at(key)); }
  void print() const {
    std::printf("options:");
    for (const auto& [k, v] : values_) std::printf(" --%s %s", k.c_str(), v.c_str());
    std::printf("\n");
  }

 private:
  std::map<std::string, std::string> values_;
};

// --device cpu|cuda: where the model, its gradients, the optimizer state and
// each batch live. The error names the argument and says what to do instead.
Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::kCpu;
  if (name != "cuda") throw std::runtime_error("--device '" + name + "': expected cpu or cuda");
#ifdef DTL_HAVE_CUDA
  std::string why;
  if (dtl::cuda::gpu_count(&why) == 0) {
    throw std::runtime_error("--device cuda: no GPU here (" + why + "); leave --device out to train on the CPU");
  }
  return Device::kCuda;
#else
  throw std::runtime_error(
      "--device cuda: this build has no CUDA (nvcc was not found when it was configured); "
      "leave --device out to train on the CPU");
#endif
}

// A batch's home on `device`: the host tensor itself on the CPU, a device tensor
// of the same shape otherwise (allocated once; upload() fills it every step).
Tensor on_device(const Tensor& host, Device device) {
  return device == Device::kCpu ? host : Tensor::zeros(host.shape(), host.dtype(), MemoryCategory::kOther, device);
}
void upload(const Tensor& dst, const Tensor& host) {
  if (dst.device() != Device::kCpu) dst.copy_from(host);  // waits for the compute stream: the host copy is reusable
}

// Waits until everything queued on the GPU is done (a copy back on the compute
// stream waits for it), so that a time taken after this covers the work.
void finish(const Tensor& on_device_tensor) {
  if (on_device_tensor.device() != Device::kCuda) return;
  Tensor one = Tensor::zeros({1}, on_device_tensor.dtype(), MemoryCategory::kOther);
  one.copy_from(on_device_tensor.view(0, {1}));
}

// The tracker's table, taken right after the training loop (evaluation and
// sampling afterwards use other batch sizes and would change the peaks).
void print_memory(const std::string& table) {
  std::printf("memory during training, by category (exact bytes: numel x dtype size):\n%s", table.c_str());
}

// Where the summary's time was spent.
std::string device_note(Device device) {
  if (device == Device::kCuda) return "on the GPU";
  return "on the CPU, gemm threads " + std::to_string(dtl::nn::gemm_threads());
}

// --------------------------------------------------------------------------
// MLP on spirals
// --------------------------------------------------------------------------

// Accuracy and mean loss of `model` over a whole data set, in batches of 512.
std::pair<double, double> evaluate(dtl::nn::Model& model, const dtl::data::Classification& data, Device device) {
  dtl::nn::SoftmaxCrossEntropy ce;
  std::int64_t correct = 0;
  double loss = 0;
  for (std::int64_t at = 0; at < data.count; at += 512) {
    const std::int64_t rows = std::min<std::int64_t>(512, data.count - at);
    Tensor x = Tensor::zeros({rows, data.features}, DType::kF32, MemoryCategory::kOther);
    Tensor y = Tensor::zeros({rows}, DType::kI32, MemoryCategory::kOther);
    std::copy_n(data.x.begin() + at * data.features, rows * data.features, x.data<float>());
    std::copy_n(data.y.begin() + at, rows, y.data<std::int32_t>());
    loss += ce.forward(model.forward(device == Device::kCpu ? x : x.to(device)),
                       device == Device::kCpu ? y : y.to(device)) *
            static_cast<double>(rows);
    correct += ce.correct();
  }
  return {static_cast<double>(correct) / static_cast<double>(data.count), loss / static_cast<double>(data.count)};
}

int train_mlp(const Options& o) {
  const auto settings = dtl::data::recommended_spirals();
  const auto [train, test] = dtl::data::split(dtl::data::make_spirals(settings), settings.test_fraction);
  const std::int64_t batch = o.integer("batch");
  const long long steps = o.integer("steps");
  const long long log_every = o.integer("log-every");
  const Device device = parse_device(o.text("device"));
  dtl::nn::Model model =
      dtl::nn::make_mlp(train.features, o.integer("hidden"), train.classes, static_cast<int>(o.integer("depth")),
                        static_cast<std::uint64_t>(o.integer("seed")));
  if (device != Device::kCpu) model.to(device);
  // Flat buffers: the optimizer updates the whole model as one span.
  const Tensor& params = model.flatten_values();
  const Tensor& grads = model.flatten_grads();
  dtl::nn::AdamW adam({.lr = static_cast<float>(o.real("lr")), .weight_decay = 0.0f}, params.numel(), device);
  std::printf("mlp: %lld parameters, spirals %lld train / %lld test, %lld classes\n",
              static_cast<long long>(model.parameter_count()), static_cast<long long>(train.count),
              static_cast<long long>(test.count), static_cast<long long>(train.classes));

  dtl::data::DistributedSampler sampler(train.count, /*rank=*/0, /*world_size=*/1,
                                        static_cast<std::uint64_t>(o.integer("seed")));
  std::vector<std::int64_t> order;
  std::size_t next = 0;
  std::int64_t epoch = 0;
  Tensor x = Tensor::zeros({batch, train.features}, DType::kF32, MemoryCategory::kOther);
  Tensor y = Tensor::zeros({batch}, DType::kI32, MemoryCategory::kOther);
  const Tensor x_dev = on_device(x, device), y_dev = on_device(y, device);
  dtl::nn::SoftmaxCrossEntropy ce;
  dtl::nn::memory_tracker(device).reset_peak();
  const auto start = Clock::now();
  double window_loss = 0;
  std::int64_t window_correct = 0, window_rows = 0;
  for (long long step = 1; step <= steps; ++step) {
    // Sample: the next `batch` rows of this epoch's permutation.
    if (next + static_cast<std::size_t>(batch) > order.size()) {
      sampler.set_epoch(epoch++);
      order = sampler.indices();
      next = 0;
    }
    const dtl::data::Classification b =
        dtl::data::take(train, std::span<const std::int64_t>(order).subspan(next, static_cast<std::size_t>(batch)));
    next += static_cast<std::size_t>(batch);
    std::copy(b.x.begin(), b.x.end(), x.data<float>());  // x is (B, features)
    std::copy(b.y.begin(), b.y.end(), y.data<std::int32_t>());  // y is (B)
    upload(x_dev, x);
    upload(y_dev, y);
    // Step.
    model.zero_grad();
    const double loss = ce.forward(model.forward(x_dev), y_dev);  // logits (B, classes)
    model.backward(ce.backward());
    adam.step(params, grads);  // runs where params live

    window_loss += loss * static_cast<double>(batch);
    window_correct += ce.correct();
    window_rows += batch;
    if (step % log_every == 0 || step == steps) {
      std::printf("step %5lld/%lld | loss %.4f | train acc %5.1f%% | %.2f ms/step | epoch %lld\n", step, steps,
                  window_loss / static_cast<double>(window_rows),
                  100.0 * static_cast<double>(window_correct) / static_cast<double>(window_rows),
                  1e3 * seconds_since(start) / static_cast<double>(step), static_cast<long long>(epoch));
      window_loss = 0;
      window_correct = window_rows = 0;
    }
  }
  finish(params);
  const double train_seconds = seconds_since(start);
  const std::string memory = dtl::nn::memory_tracker(device).report();
  const auto [test_acc, test_loss] = evaluate(model, test, device);
  const auto [train_acc, train_loss] = evaluate(model, train, device);
  std::printf("\nsummary: mlp, %lld steps of batch %lld in %.2f s (%.2f ms/step, %s)\n", steps,
              static_cast<long long>(batch), train_seconds, 1e3 * train_seconds / static_cast<double>(steps),
              device_note(device).c_str());
  std::printf("  train loss %.4f, train accuracy %.2f%%\n", train_loss, 100 * train_acc);
  std::printf("  test  loss %.4f, test  accuracy %.2f%% (target >= 95%%)\n", test_loss, 100 * test_acc);
  print_memory(memory);
  return test_acc >= 0.95 ? 0 : 2;
}

// --------------------------------------------------------------------------
// Tiny GPT on generated text
// --------------------------------------------------------------------------

// Fills x and y (both (B, T)) with random windows of `tokens`: y is x shifted by one.
void sample_windows(const std::vector<std::int32_t>& tokens, std::int64_t begin, std::int64_t end, dtl::Rng& rng,
                    const Tensor& x, const Tensor& y) {
  const std::int64_t batch = x.dim(0), seq = x.dim(1);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t start = begin + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(end - begin - seq - 1)));
    for (std::int64_t t = 0; t < seq; ++t) {
      x.data<std::int32_t>()[b * seq + t] = tokens[static_cast<std::size_t>(start + t)];
      y.data<std::int32_t>()[b * seq + t] = tokens[static_cast<std::size_t>(start + t + 1)];
    }
  }
}

int train_gpt(const Options& o) {
  const std::uint64_t seed = static_cast<std::uint64_t>(o.integer("seed"));
  const dtl::data::CharCorpus corpus = dtl::data::encode_chars(dtl::data::make_char_corpus(o.integer("corpus"), seed));
  const auto vocab = static_cast<std::int64_t>(corpus.vocab.size());
  const auto n = static_cast<std::int64_t>(corpus.tokens.size());
  const std::int64_t split = n * 9 / 10;  // the last 10% is held out
  const std::int64_t batch = o.integer("batch"), seq = o.integer("context");
  const long long steps = o.integer("steps"), log_every = o.integer("log-every");
  const Device device = parse_device(o.text("device"));
  dtl::nn::Model model = dtl::nn::make_gpt(vocab, seq, o.integer("channels"), o.integer("heads"),
                                           static_cast<int>(o.integer("layers")), seed);
  if (device != Device::kCpu) model.to(device);
  const Tensor& params = model.flatten_values();
  const Tensor& grads = model.flatten_grads();
  dtl::nn::AdamW adam({.lr = static_cast<float>(o.real("lr")), .weight_decay = 0.0f}, params.numel(), device);
  std::printf("gpt: %lld parameters, %d units, vocab %lld, corpus %lld characters (%lld train, %lld held out)\n",
              static_cast<long long>(model.parameter_count()), model.unit_count(), static_cast<long long>(vocab),
              static_cast<long long>(n), static_cast<long long>(split), static_cast<long long>(n - split));
  std::printf("a uniform guess has loss ln(%lld) = %.3f\n", static_cast<long long>(vocab), std::log(static_cast<double>(vocab)));

  Tensor x = Tensor::zeros({batch, seq}, DType::kI32, MemoryCategory::kOther);
  Tensor y = Tensor::zeros({batch, seq}, DType::kI32, MemoryCategory::kOther);
  const Tensor x_dev = on_device(x, device), y_dev = on_device(y, device);
  dtl::Rng rng(seed + 17);
  dtl::nn::SoftmaxCrossEntropy ce;
  // Held-out loss over a fixed set of 8 batches (same windows every time).
  auto held_out_loss = [&] {
    dtl::Rng fixed(seed + 99);
    double total = 0;
    for (int i = 0; i < 8; ++i) {
      sample_windows(corpus.tokens, split, n, fixed, x, y);
      upload(x_dev, x);
      upload(y_dev, y);
      total += ce.forward(model.forward(x_dev), y_dev);
    }
    return total / 8;
  };
  const double first_val = held_out_loss();
  std::printf("step     0/%lld | held-out loss %.4f\n", steps, first_val);
  dtl::nn::memory_tracker(device).reset_peak();
  const auto start = Clock::now();
  double window = 0;
  int window_steps = 0;
  for (long long step = 1; step <= steps; ++step) {
    sample_windows(corpus.tokens, 0, split, rng, x, y);  // x, y are (B, T)
    upload(x_dev, x);
    upload(y_dev, y);
    model.zero_grad();
    window += ce.forward(model.forward(x_dev), y_dev);  // logits (B, T, V)
    ++window_steps;
    model.backward(ce.backward());
    adam.step(params, grads);
    if (step % log_every == 0 || step == steps) {
      std::printf("step %5lld/%lld | train loss %.4f | %.1f ms/step\n", step, steps, window / window_steps,
                  1e3 * seconds_since(start) / static_cast<double>(step));
      window = 0;
      window_steps = 0;
    }
  }
  finish(params);
  const double train_seconds = seconds_since(start);
  const std::string memory = dtl::nn::memory_tracker(device).report();
  const double last_val = held_out_loss();

  // A sample: greedy decoding from a one-word prompt, the window sliding over the context.
  std::vector<std::int32_t> text = dtl::data::encode_text(corpus, "The ");
  Tensor prompt = Tensor::zeros({1, seq}, DType::kI32, MemoryCategory::kOther);
  for (int i = 0; i < 120; ++i) {
    const std::int64_t len = std::min<std::int64_t>(seq, static_cast<std::int64_t>(text.size()));
    Tensor window_tokens = prompt.view(0, {1, len});
    std::copy(text.end() - len, text.end(), window_tokens.data<std::int32_t>());
    const Tensor logits =
        device == Device::kCpu ? model.forward(window_tokens) : model.forward(window_tokens.to(device)).to(Device::kCpu);
    const float* last = logits.data<float>() + (len - 1) * vocab;  // logits (1, len, V)
    text.push_back(static_cast<std::int32_t>(std::max_element(last, last + vocab) - last));
  }
  std::printf("\nsample (greedy): %s\n", dtl::data::decode_chars(corpus, text).c_str());
  std::printf("\nsummary: gpt, %lld steps of %lld x %lld tokens in %.2f s (%.1f ms/step, %s)\n", steps,
              static_cast<long long>(batch), static_cast<long long>(seq), train_seconds,
              1e3 * train_seconds / static_cast<double>(steps), device_note(device).c_str());
  std::printf("  held-out loss %.4f -> %.4f (uniform guess %.3f)\n", first_val, last_val,
              std::log(static_cast<double>(vocab)));
  print_memory(memory);
  return last_val < first_val - 0.5 ? 0 : 2;
}

void usage() {
  std::printf(
      "usage: dtl_train mlp|gpt [--option value ...]\n"
      "  mlp: an MLP on the generated spirals (3000 points, 3 arms); exits 2 below 95%% test accuracy\n"
      "       --steps 3000 --batch 64 --hidden 64 --depth 2 --lr 0.01 --log-every 250 --seed 1\n"
      "  gpt: a tiny GPT on generated English-like text; exits 2 unless the held-out loss falls by 0.5\n"
      "       --steps 300 --batch 8 --context 64 --channels 64 --heads 4 --layers 2 --lr 0.003\n"
      "       --corpus 200000 --log-every 25 --seed 1\n"
      "  both: --threads N  OpenBLAS threads (default 1, one per rank)\n"
      "        --device cpu|cuda  where to train (default cpu; cuda needs a GPU and a CUDA build)\n");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
      usage();
      return argc < 2 ? 1 : 0;
    }
    for (int i = 2; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
        usage();
        return 0;
      }
    }
    const std::string what = argv[1];
    if (what == "mlp") {
      const Options o(argc, argv, 2,
                      {{"steps", "3000"}, {"batch", "64"}, {"hidden", "64"}, {"depth", "2"}, {"lr", "0.01"},
                       {"log-every", "250"}, {"seed", "1"}, {"threads", "1"}, {"device", "cpu"}});
      dtl::nn::set_gemm_threads(static_cast<int>(o.integer("threads")));
      o.print();
      return train_mlp(o);
    }
    if (what == "gpt") {
      const Options o(argc, argv, 2,
                      {{"steps", "300"}, {"batch", "8"}, {"context", "64"}, {"channels", "64"}, {"heads", "4"},
                       {"layers", "2"}, {"lr", "0.003"}, {"corpus", "200000"}, {"log-every", "25"}, {"seed", "1"},
                       {"threads", "1"}, {"device", "cpu"}});
      dtl::nn::set_gemm_threads(static_cast<int>(o.integer("threads")));
      o.print();
      return train_gpt(o);
    }
    usage();
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtl_train: %s\n", e.what());
    return 1;
  }
}
