#include "jinja/interpreter.h"

#include <algorithm>
#include <ctime>

#include "core/error.h"

namespace pagoda::jinja {


Interpreter::Interpreter(const std::string& origin, RenderLimits limits,
                         std::optional<std::time_t> now)
    : origin_(origin), limits_(limits), now_(now) {}

std::time_t Interpreter::now() const { return now_ ? *now_ : std::time(nullptr); }

void Interpreter::Fail(const std::string& message) const {
  ThrowInvalidArgument(origin_ + ":" + std::to_string(line_) + ": " + message);
}

void Interpreter::Rethrow(const Error& e) const {
  if (const auto* raised = dynamic_cast<const RaisedError*>(&e)) throw *raised;
  if (std::string_view(e.what()).substr(0, origin_.size() + 1) == origin_ + ":") throw e;
  Fail(e.what());
}

void Interpreter::CheckSize(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    Fail("template output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
}

std::string Interpreter::Render(const NodeList& nodes, const DictData& context) {
  scopes_.clear();
  scopes_.push_back(Scope{context.items, -1});
  std::string out;
  out_ = &out;
  ExecNodes(nodes);
  out_ = nullptr;
  return out;
}

std::string Interpreter::RenderToString(const NodeList& nodes) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    ExecNodes(nodes);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

const Value* Interpreter::Lookup(const std::string& name) const {
  for (int i = static_cast<int>(scopes_.size()) - 1; i >= 0; i = scopes_[i].parent) {
    for (const auto& [k, v] : scopes_[i].vars) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Interpreter::Assign(const std::string& name, Value value) {
  for (auto& [k, v] : scopes_.back().vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  scopes_.back().vars.emplace_back(name, std::move(value));
}

Interpreter::Flow Interpreter::ExecNodes(const NodeList& nodes) {
  DepthGuard guard(this);
  for (const auto& node : nodes) {
    Flow flow = Exec(*node);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::Exec(const Node& node) {
  if (++steps_ > limits_.max_steps) {
    Fail("template exceeded " + std::to_string(limits_.max_steps) + " steps");
  }
  line_ = node.line;
  switch (node.kind) {
    case Node::Kind::kData:
      *out_ += node.text;
      CheckSize(out_->size());
      return Flow::kNormal;
    case Node::Kind::kOutput: {
      Value v = Eval(*node.expr);
      v.AppendStr(out_);
      CheckSize(out_->size());
      return Flow::kNormal;
    }
    case Node::Kind::kIf:
      for (const auto& [cond, body] : node.branches) {
        line_ = cond->line;
        if (Eval(*cond).Truthy()) return ExecNodes(body);
      }
      return ExecNodes(node.else_body);
    case Node::Kind::kFor:
      ExecFor(node, Eval(*node.expr), 0);
      return Flow::kNormal;
    case Node::Kind::kSet:
      ExecSet(node);
      return Flow::kNormal;
    case Node::Kind::kSetBlock: {
      Value v(RenderToString(node.body));
      if (node.filter) v = EvalFilter(*node.filter, &v);
      Assign(node.targets[0], std::move(v));
      return Flow::kNormal;
    }
    case Node::Kind::kMacro:
      DefineMacro(node);
      return Flow::kNormal;
    case Node::Kind::kCallBlock: {
      const Node* call_node = &node;
      int parent = static_cast<int>(scopes_.size()) - 1;
      Value caller = Value::MakeFunction("caller", [this, call_node, parent](Interpreter&,
                                                                             CallArgs& args) {
        scopes_.push_back(Scope{{}, parent});
        for (size_t i = 0; i < call_node->params.size(); ++i) {
          const Value* arg = args.Get(i, call_node->params[i].name);
          Value v = arg ? *arg
                        : call_node->params[i].default_value
                              ? Eval(*call_node->params[i].default_value)
                              : Value::Undefined("'" + call_node->params[i].name +
                                                 "' is undefined");
          scopes_.back().vars.emplace_back(call_node->params[i].name, std::move(v));
        }
        std::string text;
        try {
          text = RenderToString(call_node->body);
        } catch (...) {
          scopes_.pop_back();
          throw;
        }
        scopes_.pop_back();
        return Value(std::move(text));
      });
      const Expr& call = *node.expr;
      Value callee = Eval(*call.children[0]);
      CallArgs args;
      EvalArgs(call, 1, &args);
      args.keyword.emplace_back("caller", caller);
      CallValue(callee, args).AppendStr(out_);
      CheckSize(out_->size());
      return Flow::kNormal;
    }
    case Node::Kind::kFilterBlock: {
      Value body(RenderToString(node.body));
      EvalFilter(*node.filter, &body).AppendStr(out_);
      CheckSize(out_->size());
      return Flow::kNormal;
    }
    case Node::Kind::kWith: {
      std::vector<Value> values;
      for (const auto& e : node.values) values.push_back(Eval(*e));
      scopes_.push_back(Scope{{}, static_cast<int>(scopes_.size()) - 1});
      for (size_t i = 0; i < values.size(); ++i) Assign(node.targets[i], std::move(values[i]));
      Flow flow;
      try {
        flow = ExecNodes(node.body);
      } catch (...) {
        scopes_.pop_back();
        throw;
      }
      scopes_.pop_back();
      return flow;
    }
    case Node::Kind::kBreak:
      return Flow::kBreak;
    case Node::Kind::kContinue:
      return Flow::kContinue;
    case Node::Kind::kScope:
      return ExecNodes(node.body);
  }
  return Flow::kNormal;
}

namespace {

// Binds for-loop or set targets to one value, unpacking tuples.
void Unpack(const std::vector<std::string>& targets, const Value& value,
            const std::function<void(const std::string&, Value)>& assign,
            const std::function<void(const std::string&)>& fail) {
  if (targets.size() == 1) {
    assign(targets[0], value);
    return;
  }
  std::vector<Value> items = Iterate(value);
  if (items.size() != targets.size()) {
    fail(items.size() < targets.size()
             ? "not enough values to unpack (expected " + std::to_string(targets.size()) +
                   ", got " + std::to_string(items.size()) + ")"
             : "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
  }
  for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], std::move(items[i]));
}

}  // namespace

void Interpreter::ExecFor(const Node& node, const Value& iterable, int64_t depth0) {
  if (iterable.is_none() || iterable.is_number() || iterable.is_function()) {
    Fail("'" + iterable.TypeName() + "' object is not iterable");
  }
  auto items = std::make_shared<ListData>();
  items->items = Iterate(iterable);
  int line = node.line;
  auto fail = [this, line](const std::string& m) {
    line_ = line;
    Fail(m);
  };
  scopes_.push_back(Scope{{}, static_cast<int>(scopes_.size()) - 1});
  auto assign = [this](const std::string& k, Value v) { Assign(k, std::move(v)); };
  try {
    if (node.filter) {
      std::vector<Value> kept;
      for (auto& item : items->items) {
        scopes_.back().vars.clear();
        Unpack(node.targets, item, assign, fail);
        if (Eval(*node.filter).Truthy()) kept.push_back(std::move(item));
      }
      items->items = std::move(kept);
    }
    auto loop = std::make_shared<LoopInfo>();
    loop->items = items;
    loop->length = static_cast<int64_t>(items->items.size());
    loop->depth0 = depth0;
    if (node.recursive) {
      const Node* for_node = &node;
      loop->recurse = [this, for_node, depth0](Interpreter&, CallArgs& args) {
        if (args.positional.size() != 1) Fail("loop() takes exactly one argument");
        std::string buffer;
        std::string* saved = out_;
        out_ = &buffer;
        try {
          ExecFor(*for_node, args.positional[0], depth0 + 1);
        } catch (...) {
          out_ = saved;
          throw;
        }
        out_ = saved;
        return Value(std::move(buffer));
      };
    }
    Value loop_value(loop);
    for (int64_t i = 0; i < loop->length; ++i) {
      if (++steps_ > limits_.max_steps) {
        Fail("template exceeded " + std::to_string(limits_.max_steps) + " steps");
      }
      loop->index0 = i;
      scopes_.back().vars.clear();
      scopes_.back().vars.emplace_back("loop", loop_value);
      Unpack(node.targets, items->items[i], assign, fail);
      if (ExecNodes(node.body) == Flow::kBreak) break;
    }
    if (loop->length == 0 && !node.else_body.empty()) {
      scopes_.back().vars.clear();
      ExecNodes(node.else_body);
    }
  } catch (...) {
    scopes_.pop_back();
    throw;
  }
  scopes_.pop_back();
}

void Interpreter::ExecSet(const Node& node) {
  Value value = Eval(*node.expr);
  line_ = node.line;
  if (!node.attr.empty()) {
    const Value* target = Lookup(node.targets[0]);
    if (target == nullptr || !target->is_dict() || !target->dict()->is_namespace) {
      Fail("can only assign attributes of a namespace ('" + node.targets[0] + "' is not one)");
    }
    target->dict()->Set(node.attr, std::move(value));
    return;
  }
  Unpack(
      node.targets, value, [this](const std::string& k, Value v) { Assign(k, std::move(v)); },
      [this](const std::string& m) { Fail(m); });
}

void Interpreter::DefineMacro(const Node& node) {
  const Node* macro = &node;
  Assign(node.text, Value::MakeFunction(node.text, [this, macro](Interpreter&, CallArgs& args) {
           return CallMacro(*macro, args, Value());
         }));
}

Value Interpreter::CallMacro(const Node& node, CallArgs& args, const Value&) {
  DepthGuard guard(this);
  Scope scope{{}, 0};
  size_t num_params = node.params.size();
  std::vector<Value> varargs;
  for (size_t i = num_params; i < args.positional.size(); ++i) varargs.push_back(args.positional[i]);
  auto kwargs = std::make_shared<DictData>();
  Value caller;
  for (const auto& [k, v] : args.keyword) {
    bool is_param = false;
    for (size_t i = 0; i < num_params; ++i) {
      if (node.params[i].name == k) {
        if (i < args.positional.size()) {
          Fail("macro '" + node.text + "' got multiple values for argument '" + k + "'");
        }
        is_param = true;
      }
    }
    if (k == "caller") caller = v;
    else if (!is_param) kwargs->Set(k, v);
  }
  scopes_.push_back(std::move(scope));
  try {
    for (size_t i = 0; i < num_params; ++i) {
      const MacroParam& p = node.params[i];
      const Value* arg = args.Get(i, p.name);
      Value v = arg ? *arg
                    : p.default_value ? Eval(*p.default_value)
                                      : Value::Undefined("'" + p.name + "' is undefined");
      Assign(p.name, std::move(v));
    }
    Assign("varargs", Value::MakeList(std::move(varargs), /*is_tuple=*/true));
    Assign("kwargs", Value(kwargs));
    if (!caller.is_undefined()) Assign("caller", caller);
    std::string text = RenderToString(node.body);
    scopes_.pop_back();
    return Value(std::move(text));
  } catch (...) {
    scopes_.pop_back();
    throw;
  }
}

Value Interpreter::CallValue(const Value& callee, CallArgs& args) {
  DepthGuard guard(this);
  if (callee.is_function()) return callee.function()->call(*this, args);
  if (callee.is_loop() && callee.loop()->recurse) return callee.loop()->recurse(*this, args);
  if (callee.is_undefined()) {
    Fail(callee.undefined_hint().empty() ? "undefined value is not callable"
                                         : callee.undefined_hint());
  }
  Fail("'" + callee.TypeName() + "' object is not callable");
}

}  // namespace pagoda::jinja
