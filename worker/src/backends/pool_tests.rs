#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use serde_json::json;

use super::*;
use crate::backends::local::LocalSandbox;
use crate::sandbox::SandboxError;

#[test]
fn both_config_shapes_parse() {
    assert_eq!(
        parse_specs(&json!({"docker": 2})).unwrap(),
        vec![PoolSpec {
            backend: "docker".into(),
            settings: json!({}),
            size: 2
        }]
    );
    assert_eq!(
        parse_specs(&json!([{"backend": "docker", "image": "debian:bookworm-slim", "size": 1}]))
            .unwrap(),
        vec![PoolSpec {
            backend: "docker".into(),
            settings: json!({"docker_image": "debian:bookworm-slim"}),
            size: 1
        }]
    );
    assert_eq!(parse_specs(&json!(null)).unwrap(), vec![]);
    assert_eq!(
        parse_specs(&json!([{"size": 1}])).unwrap_err(),
        "warm_pool entry without a backend"
    );
    assert_eq!(
        parse_specs(&json!({"docker": "two"})).unwrap_err(),
        "warm_pool.docker: expected a number of sandboxes"
    );
}

/// A provider whose sandboxes are local stand-ins, poolable unless the
/// request asks for `"task_specific": true`.
struct Fake {
    created: AtomicUsize,
}

#[async_trait]
impl Provider for Fake {
    fn name(&self) -> &'static str {
        "fake"
    }
    async fn available(&self) -> bool {
        true
    }
    async fn create(&self, _request: &CreateRequest) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let n = self.created.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(LocalSandbox::new(format!("fake-{n}"), "/".into())))
    }
    fn pool_key(&self, request: &CreateRequest) -> Option<String> {
        (request.settings.get("task_specific") != Some(&json!(true))).then(|| "k".to_owned())
    }
}

#[tokio::test]
async fn pools_fill_hand_out_and_refill() {
    let fake = Arc::new(Fake {
        created: AtomicUsize::new(0),
    });
    let providers: Vec<Arc<dyn Provider>> = vec![fake.clone()];
    let pools = WarmPools::default();
    let problems = pools.configure(
        &[
            PoolSpec {
                backend: "fake".into(),
                settings: json!({}),
                size: 2,
            },
            PoolSpec {
                backend: "fake".into(),
                settings: json!({"task_specific": true}),
                size: 1,
            },
            PoolSpec {
                backend: "absent".into(),
                settings: json!({}),
                size: 1,
            },
        ],
        &providers,
        "w",
        "i",
    );
    assert_eq!(problems.len(), 2, "{problems:?}");
    let available = vec!["fake".to_owned()];
    assert_eq!(pools.refill(&providers, &available).await, 2);
    assert_eq!(pools.ids(), vec!["fake-0".to_owned(), "fake-1".to_owned()]);
    assert_eq!(pools.take("fake", "k").unwrap().id(), "fake-0");
    assert!(pools.take("fake", "other").is_none());
    assert_eq!(pools.refill(&providers, &available).await, 1);
    assert_eq!(pools.sizes()[0].2, 2);
    // Nothing is started for a backend that is not available.
    pools.take("fake", "k");
    assert_eq!(pools.refill(&providers, &[]).await, 0);
    pools.drain().await;
    assert!(pools.ids().is_empty());
}
