//! One declared range for every number a user can give orrery.
//!
//! Each numeric field of a file format or API body declares its range once,
//! on the field: `#[schemars(range(min = 1, max = MAX_WORKERS))]`. The
//! range goes into the type's JSON Schema ([`schemars::JsonSchema`]), and
//! [`check`] walks a parsed value against that schema, so every door (a
//! JSONL line, a TOML file, an HTTP body) refuses the same numbers with the
//! same message. [`unranged`] lists the numbers of a schema without both
//! bounds: the workspace's test (`crates/orrery/tests/ranges.rs`) walks the
//! schema of every input type with it, so a new field cannot arrive
//! unchecked.
//!
//! Rules that tie fields together (`workers × gpus_per_worker = tp·pp·dp`)
//! stay with their types; this module checks each number on its own, and a
//! NaN or an infinity is outside every range.
//!
//! The check is a serde serialiser that writes nothing: the value is walked
//! as it would be written, against the schema compiled once per type to
//! the parts that lead to a number, O(fields) a job. Reading Philly's
//! 82,247 jobs takes 1.19× what it took without the check, Muri's 1,494
//! jobs 1.32× (`cargo bench -p orrery-trace --bench readers`, one run of
//! each build on this machine).

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

/// A number outside its declared range.
#[derive(Debug, Clone, PartialEq)]
pub struct OutOfRange {
    /// Where it is, as error messages and [`crate::setups::line_of`] name
    /// fields: `jobs[1].phases[0].start_ms`.
    pub path: String,
    /// The range: `1 to 65536`.
    pub expected: String,
    /// What was there.
    pub found: String,
}

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: expected {}, found {}", self.path, self.expected, self.found)
    }
}

impl std::error::Error for OutOfRange {}

/// The JSON Schema of `T` (with its `$defs`), as JSON.
pub fn schema_of<T: JsonSchema>() -> Value {
    schemars::schema_for!(T).to_value()
}

/// Checks every number of `value` against the range its type declares;
/// the first one outside it, by path. The type's schema is compiled to a
/// [`Plan`] once and kept; a check serialises the value and walks only the
/// parts of it that hold numbers. O(size of the value).
pub fn check<T: Serialize + JsonSchema + 'static>(value: &T) -> Result<(), OutOfRange> {
    static PLANS: OnceLock<RwLock<HashMap<TypeId, Arc<Plan>>>> = OnceLock::new();
    let plans = PLANS.get_or_init(Default::default);
    let id = TypeId::of::<T>();
    let plan = match plans.read().ok().and_then(|m| m.get(&id).cloned()) {
        Some(p) => p,
        None => {
            let schema = schema_of::<T>();
            let p = Arc::new(compile(&schema, &schema, 0));
            if let Ok(mut m) = plans.write() {
                m.insert(id, p.clone());
            }
            p
        }
    };
    let mut path = String::new();
    match value.serialize(Checker { plan: &plan, path: &mut path }) {
        Ok(()) => Ok(()),
        Err(Stop::Out(e)) => Err(e),
        // A type whose serialisation fails has nothing more to check here;
        // its own checks still run.
        Err(Stop::Serde(_)) => Ok(()),
    }
}

/// A schema compiled for checking: only the parts that lead to a number.
#[derive(Debug)]
enum Plan {
    /// Nothing numeric below.
    Skip,
    /// A number and its bounds.
    Number { lo: Option<f64>, hi: Option<f64>, integer: bool },
    /// An object's properties that hold numbers, and the plan of any other
    /// key (a map's values).
    Object(Vec<(String, Plan)>, Option<Box<Plan>>),
    /// An array: its first elements' plans (a tuple), then every other's.
    Array(Vec<Plan>, Option<Box<Plan>>),
    /// `oneOf`/`anyOf`: the first branch whose outline the value has.
    Branches(Vec<(Outline, Plan)>),
    /// Several of these at once (`allOf`, or a node with several parts).
    All(Vec<Plan>),
}

/// What a `oneOf`/`anyOf` branch looks like from outside: its JSON types,
/// required keys, and a constant or enumeration.
#[derive(Debug)]
struct Outline {
    /// Bit per JSON type (see [`type_bit`]); 0 allows any.
    types: u8,
    required: Vec<String>,
    allowed: Option<Vec<Value>>,
}

/// The bit of a JSON type name in [`Outline::types`].
fn type_bit(t: &str) -> u8 {
    match t {
        "null" => 1,
        "boolean" => 2,
        "integer" | "number" => 4,
        "string" => 8,
        "array" => 16,
        "object" => 32,
        _ => 0,
    }
}

impl Outline {
    fn of(s: &Value) -> Outline {
        let allowed = match (s.get("const"), s.get("enum")) {
            (Some(c), _) => Some(vec![c.clone()]),
            (None, Some(Value::Array(e))) => Some(e.clone()),
            _ => None,
        };
        let required = match s.get("required") {
            Some(Value::Array(keys)) => keys.iter().filter_map(Value::as_str).map(str::to_string).collect(),
            _ => Vec::new(),
        };
        Outline { types: types(s).iter().map(|t| type_bit(t)).fold(0, |a, b| a | b), required, allowed }
    }
}

/// The schema `s` points to when it is a `$ref` into `root`'s `$defs`.
fn resolve<'a>(s: &'a Value, root: &'a Value) -> &'a Value {
    match s.get("$ref").and_then(Value::as_str) {
        Some("#") => root,
        Some(r) => r.strip_prefix("#/$defs/").and_then(|name| root.get("$defs")?.get(name)).unwrap_or(s),
        None => s,
    }
}

/// The JSON types a schema allows (`"type"` as a string or a list).
fn types(s: &Value) -> Vec<&str> {
    match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn is_numeric(s: &Value) -> bool {
    types(s).iter().any(|t| *t == "number" || *t == "integer")
}

/// Deepest nesting compiled: a schema that refers to itself stops here.
const MAX_DEPTH: usize = 64;

/// The plan of schema `s` (under `root`). O(size of the schema).
fn compile(s: &Value, root: &Value, depth: usize) -> Plan {
    if depth > MAX_DEPTH {
        return Plan::Skip;
    }
    let s = resolve(s, root);
    let below = |x: &Value| compile(x, root, depth + 1);
    let mut parts = Vec::new();
    if is_numeric(s) {
        parts.push(Plan::Number {
            lo: s.get("minimum").and_then(Value::as_f64),
            hi: s.get("maximum").and_then(Value::as_f64),
            integer: types(s).contains(&"integer"),
        });
    }
    if let Some(Value::Object(props)) = s.get("properties") {
        let kept: Vec<(String, Plan)> =
            props.iter().map(|(k, x)| (k.clone(), below(x))).filter(|(_, p)| !matches!(p, Plan::Skip)).collect();
        let extra = s.get("additionalProperties").filter(|a| a.is_object()).map(below);
        if !kept.is_empty() || extra.as_ref().is_some_and(|p| !matches!(p, Plan::Skip)) {
            parts.push(Plan::Object(kept, extra.map(Box::new)));
        }
    } else if let Some(extra) = s.get("additionalProperties").filter(|a| a.is_object()).map(below)
        && !matches!(extra, Plan::Skip)
    {
        parts.push(Plan::Object(Vec::new(), Some(Box::new(extra))));
    }
    let prefix: Vec<Plan> =
        s.get("prefixItems").and_then(Value::as_array).map_or(Vec::new(), |p| p.iter().map(below).collect());
    let items = s.get("items").filter(|i| i.is_object()).map(below);
    if prefix.iter().any(|p| !matches!(p, Plan::Skip)) || items.as_ref().is_some_and(|p| !matches!(p, Plan::Skip)) {
        parts.push(Plan::Array(prefix, items.map(Box::new)));
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(bs)) = s.get(key) {
            let branches: Vec<(Outline, Plan)> = bs.iter().map(|b| (Outline::of(resolve(b, root)), below(b))).collect();
            if branches.iter().any(|(_, p)| !matches!(p, Plan::Skip)) {
                parts.push(Plan::Branches(branches));
            }
        }
    }
    if let Some(Value::Array(all)) = s.get("allOf") {
        parts.extend(all.iter().map(below).filter(|p| !matches!(p, Plan::Skip)));
    }
    match parts.len() {
        0 => Plan::Skip,
        1 => parts.pop().unwrap_or(Plan::Skip),
        _ => Plan::All(parts),
    }
}

/// Whether a number reads better with an exponent (`1e10`, `1e-6`).
fn far_from_one(x: f64) -> bool {
    x.is_finite() && (x.abs() >= 1e7 || (x != 0.0 && x.abs() < 1e-3))
}

/// A bound as a person writes it: `65536`, `0.001`, `1e10`, `3.15576e8`.
fn shown(x: f64) -> String {
    if far_from_one(x) {
        format!("{x:e}")
    } else if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// `x` against `[lo, hi]` at `path`. A NaN or an infinity is out of every
/// range. O(1).
fn check_number(x: f64, exact: Option<i128>, plan: &Plan, path: &str) -> Result<(), OutOfRange> {
    let Plan::Number { lo, hi, integer } = *plan else { return Ok(()) };
    if x.is_finite() && !lo.is_some_and(|lo| x < lo) && !hi.is_some_and(|hi| x > hi) {
        return Ok(());
    }
    let kind = if integer { "an integer" } else { "a number" };
    let expected = match (lo, hi) {
        (Some(lo), Some(hi)) => format!("{kind} from {} to {}", shown(lo), shown(hi)),
        (Some(lo), None) => format!("{kind} of at least {}", shown(lo)),
        (None, Some(hi)) => format!("{kind} of at most {}", shown(hi)),
        (None, None) => format!("{kind} (finite)"),
    };
    // Integers exactly, floats as Rust prints them (`-1.0`, `NaN`), very
    // large or small ones with an exponent (`1e300`).
    let found = exact
        .map(|i| i.to_string())
        .unwrap_or_else(|| if far_from_one(x) { format!("{x:e}") } else { format!("{x:?}") });
    Err(OutOfRange { path: path.to_string(), expected, found })
}

/// Why a check stopped: a number out of range, or the value's own
/// serialisation failed.
#[derive(Debug)]
enum Stop {
    Out(OutOfRange),
    Serde(String),
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Out(e) => e.fmt(f),
            Stop::Serde(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Stop {}

impl serde::ser::Error for Stop {
    fn custom<M: std::fmt::Display>(msg: M) -> Self {
        Stop::Serde(msg.to_string())
    }
}

/// What a serialiser call reveals of a value's outline, to choose a
/// `oneOf`/`anyOf` branch: its JSON type and, for an enum variant written
/// `{"variant": ...}`, the key it will have.
/// (Strings, booleans and nulls hold no number, so they choose no branch.)
#[derive(Clone, Copy)]
enum Shape<'k> {
    Number,
    Array,
    Object(Option<&'k str>),
}

impl Plan {
    /// The plan a value of `shape` follows: through the first branch whose
    /// outline fits, and through every part of an `allOf`. An object of
    /// unknown keys takes the first object branch: an untagged or
    /// internally tagged enum of structs is not told apart (orrery's inputs
    /// have none; the agent's process socket checks its report's numbers
    /// as a struct). O(branches).
    fn for_shape<'p>(&'p self, shape: Shape<'_>, out: &mut Vec<&'p Plan>) {
        match self {
            Plan::Skip => {}
            Plan::Branches(bs) => {
                let fits = |o: &Outline| {
                    let bit = match shape {
                        Shape::Number => type_bit("number"),
                        Shape::Array => type_bit("array"),
                        Shape::Object(_) => type_bit("object"),
                    };
                    let typed = o.types == 0 || o.types & bit != 0;
                    let keyed = match shape {
                        Shape::Object(Some(k)) => o.required.is_empty() || o.required.iter().any(|r| r == k),
                        _ => true,
                    };
                    typed && keyed && o.allowed.is_none()
                };
                if let Some((_, p)) = bs.iter().find(|(o, _)| fits(o)) {
                    p.for_shape(shape, out);
                }
            }
            Plan::All(parts) => parts.iter().for_each(|p| p.for_shape(shape, out)),
            other => out.push(other),
        }
    }

    /// The plan of key `key` of an object following this plan.
    fn key(&self, key: &str) -> &Plan {
        match self {
            Plan::Object(props, extra) => {
                props.iter().find(|p| p.0 == key).map(|p| &p.1).or(extra.as_deref()).unwrap_or(&Plan::Skip)
            }
            _ => &Plan::Skip,
        }
    }

    /// The plan of element `i` of an array following this plan.
    fn element(&self, i: usize) -> &Plan {
        match self {
            Plan::Array(prefix, rest) => prefix.get(i).or(rest.as_deref()).unwrap_or(&Plan::Skip),
            _ => &Plan::Skip,
        }
    }
}

/// A serde serialiser that checks each number against its plan as the
/// value is written, and writes nothing: no intermediate JSON value, and a
/// NaN is seen as a NaN (JSON would make it `null`).
struct Checker<'p, 'a> {
    plan: &'p Plan,
    path: &'a mut String,
}

impl<'p, 'a> Checker<'p, 'a> {
    fn number(self, x: f64, exact: Option<i128>) -> Result<(), Stop> {
        if let Plan::Number { .. } = self.plan {
            return check_number(x, exact, self.plan, self.path).map_err(Stop::Out);
        }
        let mut plans = Vec::new();
        self.plan.for_shape(Shape::Number, &mut plans);
        plans.iter().try_for_each(|p| check_number(x, exact, p, self.path)).map_err(Stop::Out)
    }

    /// The compound (object or array) plans a value of `shape` follows.
    fn compound(&self, shape: Shape<'_>) -> Vec<&'p Plan> {
        let mut plans = Vec::new();
        self.plan.for_shape(shape, &mut plans);
        plans
    }

    /// An externally tagged enum variant with fields, `{"variant": inner}`:
    /// the plans of `inner` under the variant's key, the key on the path.
    fn variant(self, variant: &'static str, inner: Shape<'_>) -> Compound<'p, 'a> {
        let outer = self.compound(Shape::Object(Some(variant)));
        let mut plans = Vec::new();
        outer.iter().for_each(|p| p.key(variant).for_shape(inner, &mut plans));
        self.path.push_str(if self.path.is_empty() { "" } else { "." });
        self.path.push_str(variant);
        Compound { plans, path: self.path, next: 0, key: Some(variant.to_string()) }
    }
}

/// Runs `f` with `suffix` on the path, then takes it off again.
fn with_path<T>(path: &mut String, suffix: std::fmt::Arguments<'_>, f: impl FnOnce(&mut String) -> T) -> T {
    use std::fmt::Write;
    let len = path.len();
    let _ = path.write_fmt(suffix);
    let out = f(path);
    path.truncate(len);
    out
}

/// An object or array being written: the plans it follows, its path.
struct Compound<'p, 'a> {
    plans: Vec<&'p Plan>,
    path: &'a mut String,
    next: usize,
    key: Option<String>,
}

impl Compound<'_, '_> {
    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Stop> {
        for plan in self.plans.iter().map(|p| p.key(key)).filter(|p| !matches!(p, Plan::Skip)) {
            let len = self.path.len();
            if len > 0 {
                self.path.push('.');
            }
            self.path.push_str(key);
            let r = value.serialize(Checker { plan, path: self.path });
            self.path.truncate(len);
            r?;
        }
        Ok(())
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        let i = self.next;
        self.next += 1;
        for plan in self.plans.iter().map(|p| p.element(i)).filter(|p| !matches!(p, Plan::Skip)) {
            with_path(self.path, format_args!("[{i}]"), |path| value.serialize(Checker { plan, path }))?;
        }
        Ok(())
    }
}

macro_rules! numbers {
    ($($method:ident: $t:ty => $exact:expr),* $(,)?) => {
        $(fn $method(self, v: $t) -> Result<(), Stop> {
            #[allow(clippy::redundant_closure_call)]
            let exact: Option<i128> = ($exact)(v);
            self.number(v as f64, exact)
        })*
    };
}

impl<'p, 'a> serde::Serializer for Checker<'p, 'a> {
    type Ok = ();
    type Error = Stop;
    type SerializeSeq = Compound<'p, 'a>;
    type SerializeTuple = Compound<'p, 'a>;
    type SerializeTupleStruct = Compound<'p, 'a>;
    type SerializeTupleVariant = Compound<'p, 'a>;
    type SerializeMap = Compound<'p, 'a>;
    type SerializeStruct = Compound<'p, 'a>;
    type SerializeStructVariant = Compound<'p, 'a>;

    numbers! {
        serialize_i8: i8 => |v: i8| Some(i128::from(v)),
        serialize_i16: i16 => |v: i16| Some(i128::from(v)),
        serialize_i32: i32 => |v: i32| Some(i128::from(v)),
        serialize_i64: i64 => |v: i64| Some(i128::from(v)),
        serialize_u8: u8 => |v: u8| Some(i128::from(v)),
        serialize_u16: u16 => |v: u16| Some(i128::from(v)),
        serialize_u32: u32 => |v: u32| Some(i128::from(v)),
        serialize_u64: u64 => |v: u64| Some(i128::from(v)),
        serialize_f32: f32 => |_| None,
        serialize_f64: f64 => |_| None,
    }

    fn serialize_bool(self, _: bool) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_char(self, _: char) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_none(self) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Stop> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), Stop> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        let plans = self.compound(Shape::Object(Some(variant)));
        Compound { plans, path: self.path, next: 0, key: None }.field(variant, value)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'p, 'a>, Stop> {
        Ok(Compound { plans: self.compound(Shape::Array), path: self.path, next: 0, key: None })
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'p, 'a>, Stop> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Compound<'p, 'a>, Stop> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'p, 'a>, Stop> {
        // `{"variant": [...]}`: the array under the variant's key.
        Ok(self.variant(variant, Shape::Array))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'p, 'a>, Stop> {
        Ok(Compound { plans: self.compound(Shape::Object(None)), path: self.path, next: 0, key: None })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'p, 'a>, Stop> {
        Ok(Compound { plans: self.compound(Shape::Object(None)), path: self.path, next: 0, key: None })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'p, 'a>, Stop> {
        // `{"variant": {...}}`: the object under the variant's key.
        Ok(self.variant(variant, Shape::Object(None)))
    }
}

impl Compound<'_, '_> {
    /// Ends a variant's compound: its key comes off the path.
    fn end_variant(self) -> Result<(), Stop> {
        if let Some(k) = &self.key {
            let cut = self.path.len() - k.len();
            let cut = if cut > 0 && self.path.as_bytes()[cut - 1] == b'.' { cut - 1 } else { cut };
            self.path.truncate(cut);
        }
        Ok(())
    }
}

/// The serde traits of a compound being written, each forwarding its
/// elements (or fields) to [`Compound`]; a variant's ends with its key off
/// the path.
macro_rules! forward {
    ($trait:ident, $method:ident, elements, $end:expr) => {
        impl serde::ser::$trait for Compound<'_, '_> {
            type Ok = ();
            type Error = Stop;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
                self.element(value)
            }
            fn end(self) -> Result<(), Stop> {
                $end(self)
            }
        }
    };
    ($trait:ident, fields, $end:expr) => {
        impl serde::ser::$trait for Compound<'_, '_> {
            type Ok = ();
            type Error = Stop;
            fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Stop> {
                self.field(key, value)
            }
            fn end(self) -> Result<(), Stop> {
                $end(self)
            }
        }
    };
}

fn done(_: Compound<'_, '_>) -> Result<(), Stop> {
    Ok(())
}

forward!(SerializeSeq, serialize_element, elements, done);
forward!(SerializeTuple, serialize_element, elements, done);
forward!(SerializeTupleStruct, serialize_field, elements, done);
forward!(SerializeTupleVariant, serialize_field, elements, Compound::end_variant);
forward!(SerializeStruct, fields, done);
forward!(SerializeStructVariant, fields, Compound::end_variant);

impl serde::ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Stop> {
        // The key as JSON writes it (serde_json's serialiser; keys are
        // strings or numbers).
        let key = key.serialize(serde_json::value::Serializer).map_err(|e| Stop::Serde(e.to_string()))?;
        self.key = Some(match key {
            Value::String(k) => k,
            other => other.to_string(),
        });
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        let key = self.key.take().unwrap_or_default();
        self.field(&key, value)
    }
    fn end(self) -> Result<(), Stop> {
        Ok(())
    }
}

/// The paths of every number in `schema` (and its `$defs`) that lacks a
/// lower or an upper bound: what [`check`] would let through unchecked.
/// O(size of the schema).
pub fn unranged(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect_unranged(schema, "", &mut out);
    if let Some(Value::Object(defs)) = schema.get("$defs") {
        for (name, s) in defs {
            collect_unranged(s, name, &mut out);
        }
    }
    out
}

fn collect_unranged(s: &Value, at: &str, out: &mut Vec<String>) {
    if is_numeric(s) {
        let bounded = |k: &str, x: &str| s.get(k).is_some() || s.get(x).is_some();
        if !(bounded("minimum", "exclusiveMinimum") && bounded("maximum", "exclusiveMaximum")) {
            out.push(if at.is_empty() { "(root)".into() } else { at.to_string() });
        }
    }
    if let Some(Value::Object(props)) = s.get("properties") {
        for (k, sub) in props {
            collect_unranged(sub, &format!("{at}.{k}"), out);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = s.get(key).filter(|x| x.is_object()) {
            collect_unranged(sub, &format!("{at}[]"), out);
        }
    }
    for key in ["prefixItems", "oneOf", "anyOf", "allOf"] {
        if let Some(Value::Array(subs)) = s.get(key) {
            for (i, sub) in subs.iter().enumerate() {
                collect_unranged(sub, &format!("{at}<{key} {i}>"), out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Serialize, Deserialize, JsonSchema)]
    struct Inner {
        #[schemars(range(min = 0.5, max = 2.0))]
        x: f64,
    }

    #[derive(Serialize, Deserialize, JsonSchema)]
    enum Amount {
        Count(#[schemars(range(min = 1, max = 10))] u64),
        Share(#[schemars(range(min = 0, max = 1))] f64),
    }

    #[derive(Serialize, Deserialize, JsonSchema)]
    struct Outer {
        #[schemars(range(min = 1, max = 100))]
        n: u32,
        items: Vec<Inner>,
        maybe: Option<Inner>,
        amount: Amount,
        #[schemars(range(min = 1, max = 8))]
        limit: Option<u32>,
        named: std::collections::BTreeMap<String, Inner>,
    }

    fn outer() -> Outer {
        Outer {
            n: 5,
            items: vec![Inner { x: 1.0 }, Inner { x: 1.5 }],
            maybe: None,
            amount: Amount::Count(3),
            limit: Some(2),
            named: [("fast".to_string(), Inner { x: 1.0 })].into(),
        }
    }

    #[test]
    fn a_number_outside_its_range_is_named_by_its_path() {
        assert_eq!(check(&outer()), Ok(()));
        let mut o = outer();
        o.items[1].x = 3.0;
        let e = check(&o).expect_err("3 > 2");
        assert_eq!(
            (e.path.as_str(), e.expected.as_str(), e.found.as_str()),
            ("items[1].x", "a number from 0.5 to 2", "3.0")
        );
        let o = Outer { n: 0, ..outer() };
        assert_eq!(check(&o).expect_err("0 < 1").to_string(), "n: expected an integer from 1 to 100, found 0");
        let o = Outer { maybe: Some(Inner { x: 0.1 }), ..outer() };
        assert_eq!(check(&o).expect_err("optional struct").path, "maybe.x");
        let o = Outer { limit: Some(9), ..outer() };
        assert_eq!(check(&o).expect_err("optional number").path, "limit");
        assert_eq!(check(&Outer { limit: None, ..outer() }), Ok(()));
        let o = Outer { named: [("slow".to_string(), Inner { x: 9.0 })].into(), ..outer() };
        assert_eq!(check(&o).expect_err("a map's value").path, "named.slow.x");
    }

    #[test]
    fn each_enum_variant_keeps_its_own_range_and_nan_is_refused() {
        let o = Outer { amount: Amount::Count(11), ..outer() };
        assert_eq!(check(&o).expect_err("11 > 10").path, "amount.Count");
        let o = Outer { amount: Amount::Share(0.5), ..outer() };
        assert_eq!(check(&o), Ok(()));
        let o = Outer { amount: Amount::Share(f64::NAN), ..outer() };
        let e = check(&o).expect_err("NaN");
        assert_eq!((e.path.as_str(), e.found.as_str()), ("amount.Share", "NaN"));
        // An optional number too (JSON would have made it `null`).
        let o = Outer { limit: None, maybe: Some(Inner { x: f64::NAN }), ..outer() };
        assert_eq!(check(&o).expect_err("optional NaN").path, "maybe.x");
        let mut o = outer();
        o.items[0].x = f64::INFINITY;
        assert_eq!(check(&o).expect_err("inf").path, "items[0].x");
    }

    #[test]
    fn unranged_lists_the_numbers_without_both_bounds() {
        #[derive(Serialize, JsonSchema)]
        struct Half {
            #[schemars(range(min = 1))]
            low_only: f64,
            free: u32,
            #[schemars(range(min = 0, max = 3))]
            ok: u8,
        }
        assert_eq!(unranged(&schema_of::<Half>()), vec![".free".to_string(), ".low_only".to_string()]);
        assert!(unranged(&schema_of::<Outer>()).is_empty(), "{:?}", unranged(&schema_of::<Outer>()));
    }
}
