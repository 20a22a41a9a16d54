//! The authentication.k8s.io/v1 reviews. Upstream's `pkg/apis/authentication/validation`
//! has rules only for TokenRequest, which kbatch does not serve; what the reviews' REST
//! handlers (`pkg/registry/authentication/*`) refuse before answering is here, as the
//! message of a 400 (they return BadRequest, not Invalid: there are no field causes).
//! SelfSubjectReview has no such check: any SelfSubjectReview is answered.

use k8s_openapi::api::authentication::v1::TokenReview;

/// Upstream's message for a TokenReview without a token.
pub const TOKEN_REQUIRED: &str = "token is required for TokenReview in authentication";

/// The TokenReview REST handler's check: a token to review (an empty one is none).
pub fn token_review(r: &TokenReview) -> Result<(), &'static str> {
    if r.spec.token.is_empty() {
        return Err(TOKEN_REQUIRED);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::TokenReviewSpec;

    fn review(token: &str) -> TokenReview {
        TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: None,
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_token_review_needs_a_token() {
        assert_eq!(token_review(&review("abc")), Ok(()));
        assert_eq!(token_review(&review("")), Err(TOKEN_REQUIRED));
        assert_eq!(token_review(&TokenReview::default()), Err(TOKEN_REQUIRED));
        // Whitespace is a token as far as this check goes: upstream only counts bytes.
        assert_eq!(token_review(&review(" ")), Ok(()));
    }
}
