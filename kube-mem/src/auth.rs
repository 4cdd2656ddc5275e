//! Who a request comes from: bearer tokens mapped to users, as a real API server's static token
//! file does. The user (name and groups) is what admission sees as `request.userInfo`; there is
//! no authorization (RBAC) here, so a user may do anything admission does not refuse.
//!
//! A token not in the table, or no token, is by default taken as `system:anonymous` (the
//! in-memory server has always accepted any client, and tests rely on it);
//! [`UnknownTokens::Refuse`] answers them 401 Unauthorized instead, as a real server does.

use std::collections::BTreeMap;

use super::status::ApiError;

/// An authenticated user, as `request.userInfo` shows it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct UserInfo {
    pub username: String,
    pub groups: Vec<String>,
}

/// The user a ServiceAccount's token authenticates as.
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

impl UserInfo {
    pub fn new(username: impl Into<String>, groups: &[&str]) -> Self {
        UserInfo { username: username.into(), groups: groups.iter().map(|g| g.to_string()).collect() }
    }

    /// `system:serviceaccount:NAMESPACE:NAME`, in the groups Kubernetes puts service accounts in.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        UserInfo {
            username: format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    /// A cluster administrator, as kubeadm's admin kubeconfig authenticates.
    pub fn admin() -> Self {
        UserInfo::new("kubernetes-admin", &["system:masters", "system:authenticated"])
    }

    pub fn anonymous() -> Self {
        UserInfo::new("system:anonymous", &["system:unauthenticated"])
    }

    /// Writes made in-process, straight on the store (the simulated controllers inside a
    /// cluster): the API server's own identity.
    pub fn in_process() -> Self {
        UserInfo::new("system:apiserver", &["system:masters", "system:authenticated"])
    }
}

/// Who asks for a write, and so how admission sees it and how managedFields record it: one
/// door per verb on the store takes it.
#[derive(Debug, Clone, Copy)]
pub enum Requester<'a> {
    /// The server itself (in-process controllers, [`UserInfo::in_process`]); the object's
    /// managedFields are kept as it carries them.
    InProcess,
    /// A user, the object's managedFields kept as they come.
    User(&'a UserInfo),
    /// A client through the API: recorded in managedFields as an Update by this field manager.
    Manager(&'a UserInfo, &'a str),
}

impl Requester<'_> {
    /// The user admission sees.
    pub fn user(&self) -> &UserInfo {
        static IN_PROCESS: std::sync::LazyLock<UserInfo> = std::sync::LazyLock::new(UserInfo::in_process);
        match self {
            Requester::InProcess => &IN_PROCESS,
            Requester::User(user) | Requester::Manager(user, _) => user,
        }
    }
}

/// What a token not in the table gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownTokens {
    /// Accepted as [`UserInfo::anonymous`], and so is a request without a token.
    #[default]
    Anonymous,
    /// 401 Unauthorized, as a real API server answers.
    Refuse,
}

/// Tokens and their users.
#[derive(Debug, Default)]
pub struct Authenticator {
    tokens: BTreeMap<String, UserInfo>,
    unknown: UnknownTokens,
}

impl Authenticator {
    pub fn add(&mut self, token: &str, user: UserInfo) {
        self.tokens.insert(token.to_string(), user);
    }

    pub fn set_unknown(&mut self, unknown: UnknownTokens) {
        self.unknown = unknown;
    }

    pub fn unknown(&self) -> UnknownTokens {
        self.unknown
    }

    /// The user behind `token` (empty: none was sent).
    /// Who a token belongs to, for a TokenReview: only a token in the table authenticates (an
    /// unknown one is not anonymous there).
    pub fn review(&self, token: &str) -> Option<UserInfo> {
        self.tokens.get(token).cloned()
    }

    pub fn authenticate(&self, token: &str) -> Result<UserInfo, ApiError> {
        match (self.tokens.get(token), self.unknown) {
            (Some(user), _) => Ok(user.clone()),
            (None, UnknownTokens::Anonymous) => Ok(UserInfo::anonymous()),
            (None, UnknownTokens::Refuse) => Err(ApiError::unauthorized()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_map_to_users_and_unknown_ones_follow_the_mode() {
        let mut a = Authenticator::default();
        a.add("t1", UserInfo::service_account("stowage-system", "stowage-agent-west"));
        assert_eq!(
            a.authenticate("t1").map(|u| u.username),
            Ok("system:serviceaccount:stowage-system:stowage-agent-west".into())
        );
        assert_eq!(a.authenticate("guess"), Ok(UserInfo::anonymous()));
        assert_eq!(a.authenticate(""), Ok(UserInfo::anonymous()));
        a.set_unknown(UnknownTokens::Refuse);
        assert_eq!(a.authenticate("guess").map_err(|e| e.code), Err(401));
        assert!(a.authenticate("t1").is_ok());
    }
}
