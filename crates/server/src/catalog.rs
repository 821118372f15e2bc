//! What a client may offer a person beside the sessions themselves: the models to create one
//! with, the skills to pin, the agent's memory, and a failed request in the CLI's words. Each
//! comes from the session factory (or the one failure classification), never from a copy here.

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use penguin_omni_protocol::StopReason;

use crate::error::{json_response, opt_str, read_object, ApiError};
use crate::routes::{entry, ApiResult};
use crate::AppState;

/// `POST /api/explain`: a failed request's `status` and `errorMessage` (as `request_end`
/// carries them) in the words the CLI uses: the cause, what to check, and (given `attempt`)
/// the line that ends a run that gave up. The web app asks rather than keep a second copy of
/// the rules.
pub(crate) async fn explain(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    use penguin_llm_providers::failure::Failure;
    let obj = read_object(&headers, body, &app.body).await?;
    let status = obj
        .get("status")
        .and_then(|v| serde_json::from_value::<StopReason>(v.clone()).ok())
        .ok_or_else(|| ApiError::field("status", "a request_end status such as \"timeout\""))?;
    let message = opt_str(&obj, "errorMessage")?;
    let attempt = match obj.get("attempt") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| ApiError::field("attempt", "a positive integer"))?,
        ),
    };
    let f = Failure::classify(status, message);
    let ended = attempt.map(|n| f.ended(n));
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({"kind": f.kind, "cause": f.cause, "hint": f.hint, "ended": ended}),
    ))
}

/// `GET /api/sessions/{id}/skills`: `{skills: [...]}` its workspace is offered (the factory's).
pub(crate) async fn skills(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let e = entry(&app, p).await?;
    let factory = app.sessions.cfg.factory.clone();
    let workspace = std::path::PathBuf::from(&e.meta.workspace);
    let skills = tokio::task::spawn_blocking(move || factory.skills(&workspace))
        .await
        .map_err(|err| ApiError::internal(format!("listing skills failed: {err}")))?;
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "skills": skills }),
    ))
}

/// `GET /api/memory`: `{scopes: [...]}`, the agent's memory as its factory reads it.
pub(crate) async fn memory(State(app): State<AppState>) -> ApiResult {
    let factory = app.sessions.cfg.factory.clone();
    let scopes = tokio::task::spawn_blocking(move || factory.memory())
        .await
        .map_err(|err| ApiError::internal(format!("reading memory failed: {err}")))?;
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "scopes": scopes }),
    ))
}

pub(crate) async fn models(State(app): State<AppState>) -> ApiResult {
    let models = app.sessions.cfg.factory.models();
    Ok(json_response(
        StatusCode::OK,
        &crate::api::ModelList { models },
    ))
}

/// `GET /api/usage?from=&to=&groupBy=`: the requests' tokens and cost added up from the
/// traces ([`crate::usage`]), priced by the factory. `from` and `to` are `YYYY-MM-DD` (UTC;
/// `to`'s whole day counts) or RFC 3339 times; `groupBy` is `day` (the default), `model` or
/// `session`. Anything else is a 400 naming the parameter.
pub(crate) async fn usage(State(app): State<AppState>, uri: axum::http::Uri) -> ApiResult {
    let mut query = crate::usage::UsageQuery::default();
    let bad = |k: &str, e: String| ApiError::bad_request("invalid_query", format!("{k}: {e}"));
    for (k, v) in crate::requests::query_pairs(&uri) {
        match k {
            "from" if !v.is_empty() => {
                query.from = Some(crate::usage::parse_bound(&v, false).map_err(|e| bad(k, e))?)
            }
            "to" if !v.is_empty() => {
                query.to = Some(crate::usage::parse_bound(&v, true).map_err(|e| bad(k, e))?)
            }
            "groupBy" => query.group_by = v.parse().map_err(|e| bad(k, e))?,
            "from" | "to" | "access_token" => {}
            other => {
                return Err(ApiError::bad_request(
                    "invalid_query",
                    format!(
                        "{:?} is not a parameter of /api/usage: from, to, groupBy",
                        other.chars().take(64).collect::<String>()
                    ),
                ))
            }
        }
    }
    let factory = app.sessions.cfg.factory.clone();
    // A cluster's usage is in its replicated traces; a node's own files hold only the
    // sessions it ran.
    let cluster = match &app.sessions.cfg.cluster {
        Some(placement) => Some(placement.usage().await?),
        None => None,
    };
    let traces = app.sessions.cfg.location.traces_dir();
    let report = tokio::task::spawn_blocking(move || {
        let requests = match cluster {
            Some(requests) => requests,
            None => crate::usage::read_requests(&traces)?,
        };
        Ok::<_, std::io::Error>(crate::usage::summarize(
            &requests,
            &query,
            &|provider, model, tokens| factory.cost(provider, model, tokens),
        ))
    })
    .await
    .map_err(|err| ApiError::internal(format!("adding up usage failed: {err}")))?
    .map_err(|err| ApiError::internal(format!("reading the traces failed: {err}")))?;
    Ok(json_response(StatusCode::OK, &report))
}

/// `GET /api/price?provider=&model=`: `{"price": {input, cachedInput, cacheWrite, output} |
/// null}`, the factory's price of that model (dollars per million tokens), for a client that
/// costs a task's tokens itself (the web app's task footer).
pub(crate) async fn price(State(app): State<AppState>, uri: axum::http::Uri) -> ApiResult {
    let (mut provider, mut model) = (String::new(), None);
    for (k, v) in crate::requests::query_pairs(&uri) {
        match k {
            "provider" => provider = v,
            "model" => model = Some(v),
            _ => {}
        }
    }
    let model = model
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::bad_request("invalid_query", "model: expected a model id"))?;
    let price = app.sessions.cfg.factory.price(&provider, &model);
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "price": price }),
    ))
}

/// A factory's refusal as the API answers it. A function, not a `From`: a `From` into
/// `ApiError` would leave the `??` of other handlers without one error type to infer.
fn refused(e: crate::ModelsError) -> ApiError {
    {
        use crate::ModelsError as E;
        match e {
            E::NotEditable => ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                "models_not_editable",
                e.to_string(),
            ),
            E::Invalid { .. } => ApiError::bad_request("invalid_field", e.to_string()),
            E::NotFound(m) => ApiError::new(StatusCode::NOT_FOUND, "model_not_found", m),
            E::Exists(m) => ApiError::conflict("model_exists", m),
            E::Unreachable(m) => ApiError::new(StatusCode::BAD_GATEWAY, "endpoint_unreachable", m),
            E::Internal(source) => ApiError::internal(source.to_string()),
        }
    }
}

/// The body's model fields; any other field but `extra` is a 400 naming it. A key sent where
/// its variable's name belongs is refused by name, so no client is left thinking it was kept.
fn model_fields(
    obj: &serde_json::Map<String, serde_json::Value>,
    extra: &[&str],
) -> Result<crate::api::ModelFields, ApiError> {
    const FIELDS: [&str; 4] = ["protocol", "baseUrl", "model", "apiKeyEnv"];
    for key in obj.keys() {
        if matches!(key.as_str(), "apiKey" | "key" | "api_key") {
            return Err(ApiError::bad_request(
                "invalid_field",
                format!("{key}: penguin never stores a key; send apiKeyEnv, the NAME of the environment variable holding it"),
            ));
        }
        if !FIELDS.contains(&key.as_str()) && !extra.contains(&key.as_str()) {
            return Err(ApiError::bad_request(
                "invalid_field",
                format!(
                    "{:?} is not a field of a model: {}",
                    key.chars().take(64).collect::<String>(),
                    FIELDS
                        .iter()
                        .chain(extra)
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    }
    let owned = |name: &str| opt_str(obj, name).map(|v| v.map(str::to_owned));
    Ok(crate::api::ModelFields {
        protocol: owned("protocol")?,
        base_url: owned("baseUrl")?,
        model: owned("model")?,
        api_key_env: owned("apiKeyEnv")?,
    })
}

/// Runs `edit` on a blocking thread (the factory writes `config.toml`), then answers the list
/// as it now is.
async fn edit(app: &AppState, edit: crate::api::ModelEdit, status: StatusCode) -> ApiResult {
    let factory = app.sessions.cfg.factory.clone();
    tokio::task::spawn_blocking(move || factory.edit_models(&edit))
        .await
        .map_err(|err| ApiError::internal(format!("changing the models failed: {err}")))?
        .map_err(refused)?;
    let models = app.sessions.cfg.factory.models();
    Ok(json_response(status, &crate::api::ModelList { models }))
}

fn model_name(p: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    p.map(|Path(name)| name)
        .map_err(|e| ApiError::bad_request("invalid_path", e.body_text()))
}

/// `POST /api/models`: `{name, protocol, baseUrl?, model, apiKeyEnv?, default?}`, a new
/// configured model; 201 with the list.
pub(crate) async fn add_model(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let obj = read_object(&headers, body, &app.body).await?;
    let fields = model_fields(&obj, &["name", "default"])?;
    let name = opt_str(&obj, "name")?
        .ok_or_else(|| ApiError::field("name", "the model's name, e.g. \"local\""))?
        .to_owned();
    let default = crate::error::opt_bool(&obj, "default")?.unwrap_or(false);
    let change = crate::api::ModelEdit::Add {
        name,
        fields,
        default,
    };
    edit(&app, change, StatusCode::CREATED).await
}

/// `PUT /api/models/{name}`: the fields given changed, `default: true` makes it the default.
pub(crate) async fn change_model(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let name = model_name(p)?;
    let obj = read_object(&headers, body, &app.body).await?;
    let fields = model_fields(&obj, &["default"])?;
    let default = match crate::error::opt_bool(&obj, "default")? {
        Some(false) => {
            return Err(ApiError::field(
                "default",
                "true (to stop a model being the default, make another one the default)",
            ))
        }
        d => d.unwrap_or(false),
    };
    if fields == crate::api::ModelFields::default() && !default {
        return Err(ApiError::bad_request(
            "invalid_field",
            "nothing to change: give protocol, baseUrl, model, apiKeyEnv or default",
        ));
    }
    let change = crate::api::ModelEdit::Change {
        name,
        fields,
        default,
    };
    edit(&app, change, StatusCode::OK).await
}

/// `DELETE /api/models/{name}`: 200 with the list left.
pub(crate) async fn remove_model(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let name = model_name(p)?;
    edit(&app, crate::api::ModelEdit::Remove { name }, StatusCode::OK).await
}

/// `POST /api/models/test` with `{"model": NAME}`: the factory's report of one-line requests.
pub(crate) async fn test_model(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let obj = read_object(&headers, body, &app.body).await?;
    if let Some(other) = obj.keys().find(|k| *k != "model") {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!(
                "{:?} is not a field of a test: model",
                other.chars().take(64).collect::<String>()
            ),
        ));
    }
    let name = opt_str(&obj, "model")?
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            ApiError::field("model", "the name of a model, as GET /api/models lists it")
        })?;
    let report = app
        .sessions
        .cfg
        .factory
        .test_model(name)
        .await
        .map_err(refused)?;
    Ok(json_response(StatusCode::OK, &report))
}

/// `POST /api/models/discover` with `{protocol, baseUrl?, apiKeyEnv?}`: the model ids the
/// endpoint lists.
pub(crate) async fn discover_models(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let obj = read_object(&headers, body, &app.body).await?;
    let fields = model_fields(&obj, &[])?;
    if fields.protocol.as_deref().unwrap_or("").is_empty() {
        return Err(ApiError::field(
            "protocol",
            "a protocol such as \"openai-chat\" or \"ollama\"",
        ));
    }
    let models = app
        .sessions
        .cfg
        .factory
        .endpoint_models(&fields)
        .await
        .map_err(refused)?;
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "models": models }),
    ))
}
