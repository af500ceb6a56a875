//! Self-telemetry over OTLP: a real OTLP/gRPC MetricsService (tonic, from
//! opentelemetry-proto) started here receives loopwatch's own metrics after a corpus run
//! went through loopwatch: `loopwatch.spans.received` equals the spans sent, with its unit,
//! `loopwatch.detections` carries the pattern/severity/service.name attributes, and the
//! resource names the service `loopwatch`. A config pointing self-telemetry at
//! loopwatch's own receiver is refused naming the key.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::server::{export_all, run_requests, span_count, test_config};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point, Metric};

#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<ExportMetricsServiceRequest>>>);

#[tonic::async_trait]
impl MetricsService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse {
            partial_success: None,
        }))
    }
}

/// The latest export's metric named `name`, with the resource's service.name.
fn latest(received: &Receiver, name: &str) -> Option<(Metric, Option<String>)> {
    let requests = received.0.lock().unwrap();
    requests.iter().rev().find_map(|r| {
        r.resource_metrics.iter().find_map(|rm| {
            let service = rm.resource.as_ref().and_then(|res| {
                res.attributes
                    .iter()
                    .find(|kv| kv.key == "service.name")
                    .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                        Any::StringValue(s) => Some(s.clone()),
                        _ => None,
                    })
            });
            rm.scope_metrics
                .iter()
                .flat_map(|sm| &sm.metrics)
                .find(|m| m.name == name)
                .map(|m| (m.clone(), service.clone()))
        })
    })
}

fn sum_points(metric: &Metric) -> Vec<(i64, Vec<(String, String)>)> {
    let Some(Data::Sum(sum)) = &metric.data else {
        panic!("{} is not a sum: {:?}", metric.name, metric.data)
    };
    assert!(sum.is_monotonic, "{} is a counter", metric.name);
    sum.data_points
        .iter()
        .map(|p| {
            let value = match p.value {
                Some(number_data_point::Value::AsInt(v)) => v,
                other => panic!("{}: {other:?}", metric.name),
            };
            let attrs = p
                .attributes
                .iter()
                .map(|kv| {
                    let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                        Some(Any::StringValue(s)) => s.clone(),
                        other => format!("{other:?}"),
                    };
                    (kv.key.clone(), v)
                })
                .collect();
            (value, attrs)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn own_metrics_reach_a_real_otlp_metrics_receiver() {
    let received = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = MetricsServiceServer::new(received.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
            .unwrap();
    });

    let mut config = test_config(None);
    config.telemetry.endpoint = Some(format!("http://{addr}"));
    config.telemetry.interval = Duration::from_millis(200);
    let server = loopwatch::server::start(config)
        .await
        .expect("server starts");
    let requests = run_requests("pydantic-ai/v5-default/s1_stuck_repeat");
    let spans: usize = requests.iter().map(span_count).sum();
    export_all(server.grpc_addr, &requests).await;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (metric, service) = loop {
        if let Some((m, s)) = latest(&received, "loopwatch.spans.received") {
            if sum_points(&m).first().map(|p| p.0) == Some(spans as i64) {
                break (m, s);
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no export with loopwatch.spans.received = {spans}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(metric.unit, "{span}");
    assert_eq!(service.as_deref(), Some("loopwatch"));

    let (detections, _) = latest(&received, "loopwatch.detections").expect("detections");
    let points = sum_points(&detections);
    let kill = points
        .iter()
        .find(|(_, a)| a.contains(&("severity".into(), "kill".into())))
        .expect("the stop profile's kill");
    assert_eq!(kill.0, 1);
    assert!(kill
        .1
        .contains(&("pattern".into(), "repeated_result".into())));
    assert!(kill.1.iter().any(|(k, _)| k == "service.name"));
    let (runs, _) = latest(&received, "loopwatch.runs.started").expect("runs started");
    assert_eq!(sum_points(&runs).iter().map(|p| p.0).sum::<i64>(), 1);
    // Every detection reached the reporter: none dropped, one point per severity.
    let (reports, _) = latest(&received, "loopwatch.detection_reports.dropped")
        .expect("detection reports dropped");
    let points = sum_points(&reports);
    assert_eq!(points.len(), 3, "{points:?}");
    assert!(points.iter().all(|(n, _)| *n == 0), "{points:?}");
    server.shutdown().await.unwrap();
}

#[test]
fn self_telemetry_into_its_own_receiver_is_refused() {
    let mut config = loopwatch::config::Config::default();
    config.telemetry.endpoint = Some("http://127.0.0.1:4317".into());
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("telemetry.endpoint"), "{err}");
    assert!(err.contains("own OTLP receiver"), "{err}");
}
