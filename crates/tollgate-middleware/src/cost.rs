//! [`Cost`]: what a request costs, set by the app in a request extension.

/// What a request costs against every limit, read from the request's extensions (1 when absent).
///
/// A handler-side layer that knows the price of a request inserts it before
/// the rate limit layer runs, for example a GraphQL server that computed
/// the query's cost: `request.extensions_mut().insert(Cost(42))`. `Cost(0)`
/// checks without consuming. A cost above a limit's quota can never pass:
/// it is answered 429 without `Retry-After`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cost(pub u64);

impl Default for Cost {
    fn default() -> Self {
        Cost(1)
    }
}

impl Cost {
    /// The cost of `request`.
    pub fn of<B>(request: &http::Request<B>) -> u64 {
        request
            .extensions()
            .get::<Cost>()
            .copied()
            .unwrap_or_default()
            .0
    }
}
