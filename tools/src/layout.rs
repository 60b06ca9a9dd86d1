//! `umlx layout`: the hardware contract's layouts, generated from the very declarations the
//! driver and the sim use (`umlx_hwdesc::registry`), never from a second table.

use std::fmt::Write;
use umlx_hwdesc::registry;
use umlx_hwdesc::{FieldKind, IfcStruct, PlainStruct};

/// The options of `umlx layout`.
#[derive(clap::Args, Debug)]
pub struct LayoutArgs {
    /// JSON instead of tables
    #[arg(long)]
    pub json: bool,
    /// One structure (e.g. qpc, cqe64); without it, all of them
    #[arg(value_name = "STRUCT")]
    pub name: Option<String>,
}

/// Runs `umlx layout [--json] [STRUCT]`.
pub fn run(a: &LayoutArgs) -> Result<(), String> {
    let json = a.json;
    let name = a.name.as_ref();
    let out = match (name, json) {
        (None, true) => all_json(),
        (None, false) => {
            let mut s = String::new();
            for st in registry::IFC {
                s.push_str(&ifc_table(st));
                s.push('\n');
            }
            for st in registry::PLAIN {
                s.push_str(&plain_table(st));
                s.push('\n');
            }
            s
        }
        (Some(n), json) => {
            if let Some(st) = registry::ifc(n) {
                if json { ifc_json(st) } else { ifc_table(st) }
            } else if let Some(st) = registry::plain(n) {
                if json { plain_json(st) } else { plain_table(st) }
            } else {
                return Err(format!("no structure named `{n}` (try `umlx layout` for the list)"));
            }
        }
    };
    println!("{}", out.trim_end());
    Ok(())
}

fn clean(name: &str) -> &str {
    name.strip_prefix("r#").unwrap_or(name)
}

/// The whole dump as one JSON object: {"ifc": {...}, "plain": {...}}.
pub fn all_json() -> String {
    let ifc: Vec<String> = registry::IFC.iter().map(|s| format!("\"{}\": {}", s.name, ifc_json(s))).collect();
    let plain: Vec<String> = registry::PLAIN.iter().map(|s| format!("\"{}\": {}", s.name, plain_json(s))).collect();
    format!("{{\"ifc\": {{{}}}, \"plain\": {{{}}}}}", ifc.join(", "), plain.join(", "))
}

fn ifc_json(s: &IfcStruct) -> String {
    let fields: Vec<String> = s
        .fields
        .iter()
        .map(|f| {
            format!("\"{}\": {{\"offset_bits\": {}, \"width_bits\": {}}}", clean(f.name), f.offset_bits, f.width_bits)
        })
        .collect();
    format!("{{\"size_bits\": {}, \"fields\": {{{}}}}}", s.size_bits, fields.join(", "))
}

fn plain_json(s: &PlainStruct) -> String {
    let fields: Vec<String> = s
        .fields
        .iter()
        .map(|f| format!("\"{}\": {{\"offset_bytes\": {}, \"size_bytes\": {}}}", f.name, f.offset_bytes, f.size_bytes))
        .collect();
    format!("{{\"size_bytes\": {}, \"fields\": {{{}}}}}", s.size_bytes, fields.join(", "))
}

fn ifc_table(s: &IfcStruct) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{} ({} bits, {:#x} bytes)", s.name, s.size_bits, s.size_bits / 8);
    let _ = writeln!(o, "  {:>8}  {:>6}  {:>5}  {:<7}  field", "bit", "byte", "width", "dw[bits]");
    for f in s.fields {
        let dw = f.offset_bits / 32;
        let hi = 31 - f.offset_bits % 32;
        let bits = if f.width_bits <= 32 && f.offset_bits % 32 + f.width_bits <= 32 {
            format!("{dw}[{hi}:{}]", hi + 1 - f.width_bits)
        } else {
            format!("{dw}..")
        };
        let kind = match f.kind {
            FieldKind::Struct(n) => format!("  ({n})"),
            FieldKind::Array { elem_bits, count } => format!("  [{count} x {elem_bits} bits]"),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "  {:>#8x}  {:>#6x}  {:>5}  {:<7}  {}{}",
            f.offset_bits,
            f.offset_bits / 8,
            f.width_bits,
            bits,
            clean(f.name),
            kind
        );
    }
    o
}

fn plain_table(s: &PlainStruct) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{} ({} bytes)", s.name, s.size_bytes);
    let _ = writeln!(o, "  {:>6}  {:>5}  field", "offset", "size");
    for f in s.fields {
        let _ = writeln!(o, "  {:>#6x}  {:>5}  {}", f.offset_bytes, f.size_bytes, f.name);
    }
    o
}
