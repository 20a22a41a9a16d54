//! ServiceAccount names and keys shared by the API server's admission and the controller that
//! keeps every namespace's default account.

/// The account a pod runs as when it names none (the ServiceAccount admission plugin's
/// `DefaultServiceAccountName`), and the one the service account controller creates in every
/// namespace.
pub const DEFAULT_SERVICE_ACCOUNT_NAME: &str = "default";

/// With the value `true` (Go's `ParseBool`), pods of this account may only use the secrets the
/// account lists (deprecated upstream since v1.32, still honoured).
pub const ENFORCE_MOUNTABLE_SECRETS_ANNOTATION: &str = "kubernetes.io/enforce-mountable-secrets";
