//! Name and label syntax as `k8s.io/apimachinery/pkg/util/validation` checks it, with its
//! messages word for word.

/// The longest DNS-1123 subdomain (`DNS1123SubdomainMaxLength`).
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;

/// `IsDNS1123Subdomain`'s message, word for word.
pub const DNS1123_SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// Whether `s` matches `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`: dot-
/// separated labels, each starting and ending alphanumeric. The length bound
/// ([`DNS1123_SUBDOMAIN_MAX`]) is the caller's: Kubernetes reports it separately.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(|label| {
        let b = label.as_bytes();
        !b.is_empty()
            && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    })
}

/// The longest DNS-1123 label (`DNS1123LabelMaxLength`), and of a qualified name's name part
/// and a label value.
pub const DNS1123_LABEL_MAX: usize = 63;

const QUALIFIED_NAME_MESSAGE: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MESSAGE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// `IsQualifiedName` (a label or annotation key): an optional DNS-1123 subdomain prefix and
/// `/`, then a name part of at most 63 characters. Each problem, as Kubernetes words it.
pub fn qualified_name(key: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            problems.push("prefix part must be non-empty".to_string());
        } else {
            if p.len() > DNS1123_SUBDOMAIN_MAX {
                problems.push("prefix part must be no more than 253 characters".to_string());
            }
            if !is_dns1123_subdomain(p) {
                problems.push(format!("prefix part {DNS1123_SUBDOMAIN_MESSAGE}"));
            }
        }
    }
    if name.is_empty() {
        problems.push("name part must be non-empty".to_string());
    } else {
        if name.len() > DNS1123_LABEL_MAX {
            problems.push("name part must be no more than 63 characters".to_string());
        }
        if !name_part(name) {
            problems.push(QUALIFIED_NAME_MESSAGE.to_string());
        }
    }
    problems
}

/// `IsValidLabelValue`: empty, or at most 63 characters of the name part's syntax.
pub fn label_value(v: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if v.len() > DNS1123_LABEL_MAX {
        problems.push("must be no more than 63 characters".to_string());
    }
    if !v.is_empty() && !name_part(v) {
        problems.push(LABEL_VALUE_MESSAGE.to_string());
    }
    problems
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn name_part(v: &str) -> bool {
    let b = v.as_bytes();
    !b.is_empty()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains_are_dot_separated_labels_each_alphanumeric_at_both_ends() {
        for ok in ["a", "example.com", "a-b.c0", "0"] {
            assert!(is_dns1123_subdomain(ok), "{ok}");
        }
        for bad in ["", "a..b", "a.-b", "a-.b", ".a", "a.", "A", "a_b", "-a"] {
            assert!(!is_dns1123_subdomain(bad), "{bad}");
        }
    }

    #[test]
    fn label_keys_and_values_as_apimachinery_checks_them() {
        assert!(qualified_name("stowage.dev/queue").is_empty());
        assert!(qualified_name("app").is_empty());
        assert_eq!(qualified_name("/x"), ["prefix part must be non-empty"]);
        assert_eq!(qualified_name("Example.com/x"), [format!("prefix part {DNS1123_SUBDOMAIN_MESSAGE}")]);
        assert_eq!(qualified_name("a/"), ["name part must be non-empty"]);
        assert_eq!(qualified_name(&"n".repeat(64)), ["name part must be no more than 63 characters"]);
        assert_eq!(qualified_name("-x"), [QUALIFIED_NAME_MESSAGE]);
        assert!(label_value("").is_empty() && label_value("v1.2_a-b").is_empty());
        assert_eq!(label_value("x-"), [LABEL_VALUE_MESSAGE]);
        assert_eq!(label_value(&"v".repeat(64)), ["must be no more than 63 characters"]);
    }
}
