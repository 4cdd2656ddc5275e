//! Object name syntax as `k8s.io/apimachinery/pkg/util/validation` checks it.

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
}
