//! JSON as Go's `encoding/json` writes it, where Kubernetes' text depends on it: field error
//! values (Trainer's webhook messages quote them), managed fields' `f:`/`k:`/`v:` keys. Compact,
//! map keys in order (serde_json's maps are sorted, as Go sorts a map's keys), strings escaped
//! as Go escapes them (Go 1.22 and later: `\b` and `\f` by name; HTML characters as `\u003c`
//! and the like unless asked not to).

use std::fmt::Write;

use serde_json::Value;

/// `v` compact, as Go writes a `map[string]interface{}` value. Nesting past `max_depth` is
/// written as `null`, so a hostile value cannot run the stack out.
pub fn write_json(out: &mut String, v: &Value, max_depth: usize) {
    write_json_in(out, v, max_depth, 0);
}

fn write_json_in(out: &mut String, v: &Value, max_depth: usize, depth: usize) {
    if depth > max_depth {
        out.push_str("null");
        return;
    }
    match v {
        Value::String(s) => write_string(out, s, true),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_in(out, item, max_depth, depth + 1);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k, true);
                out.push(':');
                write_json_in(out, item, max_depth, depth + 1);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A JSON string as Go escapes it; `html`: `<`, `>`, `&`, U+2028 and U+2029 as `\uXXXX`, as
/// `json.Marshal` does (structured-merge-diff writes its path keys without).
pub fn write_string(out: &mut String, s: &str, html: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if html => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_are_escaped_as_go_escapes_them() {
        let mut out = String::new();
        write_json(&mut out, &json!({"k<": ["a\u{8}b\u{c}\u{1}", "<&>", 1, null, true]}), 8);
        assert_eq!(out, r#"{"k\u003c":["a\bb\f\u0001","\u003c\u0026\u003e",1,null,true]}"#);
        let mut key = String::new();
        write_string(&mut key, "a<b", false);
        assert_eq!(key, r#""a<b""#);
    }

    #[test]
    fn nesting_past_the_bound_is_null() {
        let mut out = String::new();
        write_json(&mut out, &json!([[[1]]]), 1);
        assert_eq!(out, "[[null]]");
    }
}
