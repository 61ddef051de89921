#include "eval/task_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace ls::eval {

namespace {

// Word lists of scripts/model/retrieval_tasks.py, in the same order (draws index into them). Filler
// words and key words are disjoint, so a key only ever occurs in needles and questions.
constexpr std::string_view kNames[] = {
    "Anna",  "Ben",    "Clara", "David", "Elena", "Felix",   "Grace", "Henry",  "Iris",  "Jack",
    "Laura", "Martin", "Nina",  "Oscar", "Paula", "Quentin", "Rosa",  "Samuel", "Tara",  "Victor",
    "Wendy", "Adam",   "Bella", "Carl",  "Diana", "Emil",    "Fiona", "George", "Hanna", "Ivan",
    "Julia", "Karl",   "Lena",  "Marco", "Nora",  "Peter",   "Ruth",  "Simon",  "Vera",  "Walter",
};
constexpr std::string_view kNouns[] = {
    "farmer",  "teacher",  "child",  "doctor",  "baker",   "sailor", "student", "painter",
    "driver",  "neighbor", "writer", "singer",  "river",   "house",  "garden",  "letter",
    "market",  "window",   "bridge", "road",    "book",    "table",  "dog",     "cat",
    "bird",    "tree",     "boat",   "train",   "village", "city",   "song",    "story",
    "door",    "field",    "hill",   "lamp",    "cup",     "basket", "blanket", "bottle",
    "bread",   "candle",   "chair",  "clock",   "coat",    "fence",  "flower",  "forest",
    "glass",   "horse",    "island", "kitchen", "lake",    "meadow", "moon",    "mountain",
    "orchard", "paper",    "pencil", "picture", "pond",    "rain",   "roof",    "school",
    "shop",    "shore",    "sky",    "stone",   "street",  "sun",    "tower",   "valley",
    "wagon",   "wall",     "well",   "wheel",   "wind",
};
constexpr std::string_view kAdjectives[] = {
    "small",  "large",    "old",    "young",  "happy",   "tired", "busy",    "careful", "friendly",
    "heavy",  "warm",     "cold",   "bright", "dark",    "early", "late",    "simple",  "famous",
    "local",  "calm",     "green",  "yellow", "tall",    "short", "narrow",  "wide",    "soft",
    "loud",   "clean",    "empty",  "full",   "strange", "kind",  "patient", "curious", "sleepy",
    "hungry", "cheerful", "quick",  "slow",   "gray",    "brown", "round",   "flat",    "smooth",
    "rough",  "distant",  "nearby", "wet",    "dry",
};
constexpr std::string_view kVerbsT[] = {
    "found",   "carried",  "painted",  "opened",     "closed",  "watched",  "visited",   "cleaned",
    "fixed",   "followed", "noticed",  "remembered", "bought",  "sold",     "built",     "moved",
    "pushed",  "pulled",   "lifted",   "washed",     "counted", "borrowed", "described", "admired",
    "ignored", "greeted",  "answered", "filled",     "covered", "crossed",
};
constexpr std::string_view kVerbsI[] = {
    "waited", "slept",     "laughed",  "walked",   "rested",   "smiled", "listened",
    "worked", "arrived",   "returned", "wandered", "sang",     "danced", "paused",
    "stayed", "travelled", "shivered", "hurried",  "whistled", "nodded",
};
constexpr std::string_view kVerbsBase[] = {
    "see",    "carry",    "paint", "open", "close", "watch", "visit", "clean", "fix",   "follow",
    "notice", "remember", "buy",   "sell", "build", "move",  "lift",  "wash",  "count", "borrow",
};
constexpr std::string_view kAux[] = {
    "will", "can", "should", "might", "could", "would", "must", "may",
};
constexpr std::string_view kAdverbs[] = {
    "slowly", "quickly",   "quietly",  "happily",  "carefully", "gently", "loudly",
    "often",  "rarely",    "again",    "together", "alone",     "softly", "early",
    "later",  "patiently", "suddenly", "calmly",   "briefly",   "warmly",
};
constexpr std::string_view kPreps[] = {
    "near",  "behind", "beside", "under",   "above",  "across",
    "along", "around", "inside", "outside", "beyond", "past",
};
constexpr std::string_view kPlaces[] = {
    "station",  "harbor",   "library", "bakery",  "square",   "chapel",     "barn",
    "cottage",  "workshop", "museum",  "theater", "hospital", "castle",     "mill",
    "fountain", "stable",   "quarry",  "pier",    "tavern",   "lighthouse",
};
constexpr std::string_view kTimes[] = {
    "morning", "evening", "night",  "afternoon", "winter",  "summer",  "spring", "autumn",
    "week",    "month",   "Sunday", "Monday",    "weekend", "holiday", "dawn",
};
constexpr std::string_view kDeterminers[] = {
    "the", "this", "that", "one", "every",
};
constexpr std::string_view kKeyAdjectives[] = {
    "amber",  "azure",   "crimson", "golden", "silver",  "scarlet", "violet",  "ivory",  "jade",
    "coral",  "copper",  "bronze",  "cobalt", "emerald", "indigo",  "ochre",   "olive",  "teal",
    "maroon", "russet",  "tawny",   "velvet", "marble",  "granite", "crystal", "frozen", "hidden",
    "silent", "ancient", "brave",   "clever", "gentle",  "humble",  "lively",  "mellow", "nimble",
    "polite", "rapid",   "shiny",   "sturdy", "swift",   "tidy",    "vivid",   "witty",  "fuzzy",
    "jolly",  "lucky",   "merry",   "noble",  "proud",   "rusty",   "sandy",   "snowy",  "sunny",
    "windy",  "wooden",  "woolly",  "dusty",  "frosty",  "misty",   "stormy",
};
constexpr std::string_view kKeyNouns[] = {
    "falcon",  "otter",   "badger",  "heron",   "lynx",    "panther", "walrus",  "gecko",
    "toucan",  "bison",   "cobra",   "dolphin", "ferret",  "gazelle", "hamster", "iguana",
    "jackal",  "koala",   "lemur",   "marmot",  "narwhal", "ocelot",  "pelican", "quail",
    "raccoon", "salmon",  "tapir",   "urchin",  "vulture", "wombat",  "zebra",   "anchor",
    "beacon",  "compass", "lantern", "harp",    "violin",  "trumpet", "kettle",  "mirror",
    "saddle",  "spindle", "teapot",  "thimble", "trowel",  "whistle", "anvil",   "bellows",
    "chisel",  "goblet",  "hammock", "locket",  "mallet",  "pendant", "quill",   "ribbon",
    "scepter", "turbine", "cactus",  "tulip",
};
constexpr std::string_view kTemplates[] = {
    "DET ADJ NOUN VT DET NOUN PREP the PLACE",   "NAME VI ADV PREP the PLACE",
    "PREP the PLACE , the ADJ NOUN VI ADV",      "DET NOUN AUX VB the ADJ NOUN",
    "when the NOUN VI , NAME VT the NOUN",       "NAME said that the NOUN was ADJ",
    "every TIME , the ADJ NOUN VT the NOUN",     "there was one ADJ NOUN PREP the PLACE",
    "NAME and NAME VT the ADJ NOUN in the TIME", "the NOUN of the PLACE was ADJ and ADJ",
    "after the TIME , NAME VI PREP the NOUN",    "NAME VT the NOUN because it was ADJ",
};

template <size_t N>
std::string_view pick(NumpyRng& rng, const std::string_view (&words)[N]) {
  return words[static_cast<size_t>(rng.integers(0, static_cast<int64_t>(N)))];
}

// The word list of a template slot; empty for a literal word.
std::span<const std::string_view> slot_words(std::string_view slot) {
  if (slot == "NAME") return kNames;
  if (slot == "NOUN") return kNouns;
  if (slot == "ADJ") return kAdjectives;
  if (slot == "VT") return kVerbsT;
  if (slot == "VI") return kVerbsI;
  if (slot == "VB") return kVerbsBase;
  if (slot == "AUX") return kAux;
  if (slot == "ADV") return kAdverbs;
  if (slot == "PREP") return kPreps;
  if (slot == "PLACE") return kPlaces;
  if (slot == "TIME") return kTimes;
  if (slot == "DET") return kDeterminers;
  return {};
}

std::string needle(std::string_view key, int64_t value) {
  return fmt::format("The special magic number for {} is {}.", key, value);
}

std::string sample_key(NumpyRng& rng, std::set<std::string>& avoid) {
  while (true) {
    // Two statements: the adjective is drawn first (operands of + are unsequenced).
    std::string key = std::string(pick(rng, kKeyAdjectives)) + "-";
    key += pick(rng, kKeyNouns);
    if (!avoid.contains(key) && is_eval_key(key)) {
      avoid.insert(key);
      return key;
    }
  }
}

// A distractor sharing the adjective or the noun with `key` (else a random key).
std::string sample_near_key(NumpyRng& rng, const std::string& key, std::set<std::string>& avoid) {
  const size_t dash = key.find('-');
  const std::string adj = key.substr(0, dash);
  const std::string noun = key.substr(dash + 1);
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::string cand = rng.random() < 0.5 ? adj + "-" + std::string(pick(rng, kKeyNouns))
                                          : std::string(pick(rng, kKeyAdjectives)) + "-" + noun;
    if (!avoid.contains(cand) && is_eval_key(cand)) {
      avoid.insert(cand);
      return cand;
    }
  }
  return sample_key(rng, avoid);
}

std::vector<int64_t> distinct_ints(NumpyRng& rng, int n, int64_t low, int64_t high) {
  std::vector<int64_t> out;
  while (static_cast<int>(out.size()) < n) {
    const int64_t v = rng.integers(low, high);
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

std::vector<std::string> var_names(NumpyRng& rng, int n) {
  std::vector<std::string> out;
  while (static_cast<int>(out.size()) < n) {
    std::string name;
    for (int i = 0; i < 5; ++i) name += static_cast<char>('A' + rng.integers(0, 26));
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

// sorted(rng.uniform(low, 1.0) for _ in range(n)); with low = 0 this equals sorted(rng.random(n))
// bit for bit (uniform computes low + (1 - low) * random()).
std::vector<double> sorted_uniform(NumpyRng& rng, int n, double low) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(rng.uniform(low, 1.0));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string_view task_name(Task task) {
  switch (task) {
    case Task::kNiahSingle:
      return "niah_single";
    case Task::kNiahMultikey:
      return "niah_multikey";
    case Task::kNiahMultivalue:
      return "niah_multivalue";
    case Task::kVt:
      return "vt";
  }
  return "?";
}

Result<Task> parse_task(std::string_view name) {
  for (Task t : kAllTasks) {
    if (task_name(t) == name) return t;
  }
  return invalid_argument("unknown task '{}' (niah_single, niah_multikey, niah_multivalue, vt)",
                          name);
}

std::string_view item_separator(Task task) {
  return task == Task::kVt ? " " : ", ";
}

std::string filler_sentence(NumpyRng& rng) {
  const std::string_view tmpl = pick(rng, kTemplates);
  std::string text;
  size_t begin = 0;
  while (begin <= tmpl.size()) {
    size_t end = tmpl.find(' ', begin);
    if (end == std::string_view::npos) end = tmpl.size();
    const std::string_view part = tmpl.substr(begin, end - begin);
    const std::span<const std::string_view> words = slot_words(part);
    // " ".join(words).replace(" ,", ","): a literal comma joins the previous word.
    if (!text.empty() && part != ",") text += ' ';
    if (words.empty()) {
      text += part;
    } else {
      text += words[static_cast<size_t>(rng.integers(0, static_cast<int64_t>(words.size())))];
    }
    begin = end + 1;
  }
  if (!text.empty() && text[0] >= 'a' && text[0] <= 'z')
    text[0] = static_cast<char>(text[0] - 'a' + 'A');
  return text + ".";
}

uint32_t crc32(std::string_view bytes) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : bytes) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

bool is_eval_key(std::string_view key) {
  return crc32(key) % 10 == 0;
}

TaskContent make_task_content(Task task, NumpyRng& rng, std::optional<double> depth) {
  std::set<std::string> avoid;
  const double d0 = depth ? *depth : rng.random();
  TaskContent c;
  if (task == Task::kNiahSingle || task == Task::kNiahMultikey) {
    const int num_keys = task == Task::kNiahSingle ? 1 : 4;
    const std::string key = sample_key(rng, avoid);
    std::vector<std::string> keys = {key};
    for (int i = 1; i < num_keys; ++i) {
      keys.push_back(rng.random() < 0.3 ? sample_near_key(rng, key, avoid)
                                        : sample_key(rng, avoid));
    }
    const std::vector<int64_t> values = distinct_ints(rng, num_keys, 1000000, 10000000);
    std::vector<double> depths = {d0};
    for (int i = 1; i < num_keys; ++i) depths.push_back(rng.random());
    // The queried needle's rank among needles at the same depth is random.
    const std::vector<int64_t> order = rng.permutation(num_keys);
    for (int i = 0; i < num_keys; ++i) {
      const auto k = static_cast<size_t>(i);
      c.items.push_back({needle(keys[k], values[k]), depths[k], order[k]});
    }
    c.header = kHeaderNiah;
    c.question =
        fmt::format("What is the special magic number for {} mentioned in the provided text?", key);
    c.answer_prefix = fmt::format("The special magic number for {} is", key);
    c.answers = {std::to_string(values[0])};
    c.first_depth = d0;
  } else if (task == Task::kNiahMultivalue) {
    const int num_values = 4;
    const std::string key = sample_key(rng, avoid);
    const std::vector<int64_t> values = distinct_ints(rng, num_values, 1000000, 10000000);
    std::vector<double> depths;
    if (!depth) {
      depths = sorted_uniform(rng, num_values, 0.0);
    } else {  // the first value sits at `depth`, the others after it
      depths = {d0};
      for (double d : sorted_uniform(rng, num_values - 1, d0)) depths.push_back(d);
    }
    for (int i = 0; i < num_values; ++i) {
      const auto k = static_cast<size_t>(i);
      c.items.push_back({needle(key, values[k]), depths[k], i});
      c.answers.push_back(std::to_string(values[k]));
    }
    c.header = kHeaderNiah;
    c.question = fmt::format(
        "What are all the special magic numbers for {} mentioned in the provided text?", key);
    c.answer_prefix = fmt::format("The special magic numbers for {} are", key);
    c.first_depth = depths[0];
  } else {  // vt: 2 chains of 3 hops
    const int num_chains = 2;
    const int num_hops = 3;
    const std::vector<std::string> names = var_names(rng, num_chains * (num_hops + 1));
    const std::vector<int64_t> values = distinct_ints(rng, num_chains, 10000, 100000);
    std::vector<double> first_depths;
    for (int ch = 0; ch < num_chains; ++ch) {
      std::vector<double> ds;
      if (ch == 0 && depth) {
        ds = {d0};
        for (double d : sorted_uniform(rng, num_hops, d0)) ds.push_back(d);
      } else {
        ds = sorted_uniform(rng, num_hops + 1, 0.0);
      }
      for (int h = 0; h <= num_hops; ++h) {
        const auto n = static_cast<size_t>(ch * (num_hops + 1) + h);
        std::string text =
            h == 0 ? fmt::format("VAR {} = {}.", names[n], values[static_cast<size_t>(ch)])
                   : fmt::format("VAR {} = VAR {}.", names[n], names[n - 1]);
        c.items.push_back({std::move(text), ds[static_cast<size_t>(h)], ch * 100 + h});
      }
      first_depths.push_back(ds[0]);
    }
    const auto q = static_cast<size_t>(depth ? 0 : rng.integers(0, num_chains));
    for (int h = 0; h <= num_hops; ++h) {
      c.answers.push_back(names[q * static_cast<size_t>(num_hops + 1) + static_cast<size_t>(h)]);
    }
    c.header = kHeaderVt;
    c.question = fmt::format("Find all variables that are assigned the value {} in the text above.",
                             values[q]);
    c.answer_prefix = fmt::format("The variables assigned the value {} are", values[q]);
    c.first_depth = first_depths[q];
  }
  return c;
}

}  // namespace ls::eval
