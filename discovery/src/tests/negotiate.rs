use crate::negotiate::*;

const KUBECTL: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
const KUBECTL_127: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
const V2_ONLY: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const BETA_ONLY: &str = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

const V2: Negotiated = Negotiated::Aggregated {
    version: AggregatedVersion::V2,
    no_peer: false,
    format: Format::Json,
};
const BETA: Negotiated = Negotiated::Aggregated {
    version: AggregatedVersion::V2Beta1,
    no_peer: false,
    format: Format::Json,
};
const LEGACY: Result<Negotiated, NotAcceptable> = Ok(Negotiated::Legacy {
    format: Format::Json,
});
const NOT_ACCEPTABLE: Result<Negotiated, NotAcceptable> = Err(NotAcceptable);

fn root(accept: Option<&str>) -> Result<Negotiated, NotAcceptable> {
    negotiate(accept, Endpoint::Root, &NegotiateOptions::default())
}

fn root_without_beta(accept: Option<&str>) -> Result<Negotiated, NotAcceptable> {
    negotiate(
        accept,
        Endpoint::Root,
        &NegotiateOptions {
            serve_v2beta1: false,
        },
    )
}

fn group(accept: Option<&str>) -> Result<Negotiated, NotAcceptable> {
    negotiate(accept, Endpoint::LegacyOnly, &NegotiateOptions::default())
}

#[test]
fn real_client_headers() {
    // kubectl / client-go (and kube-rs run_aggregated)
    assert_eq!(root(Some(KUBECTL)), Ok(V2));
    assert_eq!(root_without_beta(Some(KUBECTL)), Ok(V2));
    // kubectl 1.27
    assert_eq!(root(Some(KUBECTL_127)), Ok(BETA));
    assert_eq!(root_without_beta(Some(KUBECTL_127)), LEGACY);
    // kube-rs run(): no Accept header at all
    assert_eq!(root(None), LEGACY);
    assert_eq!(root(Some("")), LEGACY);
    assert_eq!(root(Some("   ")), LEGACY);
    // Python kubernetes client
    assert_eq!(root(Some("application/json")), LEGACY);
    // The aggregator's own discovery fetch header
    assert_eq!(root(Some(&format!("{V2_ONLY},{BETA_ONLY}"))), Ok(V2));
}

#[test]
fn content_types_echo_the_negotiated_parameters() {
    assert_eq!(
        V2.content_type(),
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(
        BETA.content_type(),
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    );
    assert_eq!(
        Negotiated::Legacy {
            format: Format::Json
        }
        .content_type(),
        "application/json"
    );
}

#[test]
fn parameter_order_and_spacing_do_not_matter() {
    assert_eq!(
        root(Some(
            "application/json; as=APIGroupDiscoveryList; v=v2; g=apidiscovery.k8s.io"
        )),
        Ok(V2)
    );
    assert_eq!(root(Some(" application/json ;v=v2;g=apidiscovery.k8s.io;as=APIGroupDiscoveryList , application/json")), Ok(V2));
}

#[test]
fn incomplete_or_wrong_parameters_are_not_aggregated() {
    for header in [
        "application/json;g=apidiscovery.k8s.io;v=v2",
        "application/json;v=v2;as=APIGroupDiscoveryList",
        "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupList",
        "application/json;g=other.io;v=v2;as=APIGroupDiscoveryList",
    ] {
        // Only a transform clause: the legacy handler refuses it.
        assert_eq!(root(Some(header)), NOT_ACCEPTABLE, "{header}");
        assert_eq!(
            root(Some(&format!("{header},application/json"))),
            LEGACY,
            "{header}"
        );
    }
}

#[test]
fn q_values_order_clauses() {
    let header = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList;q=0.9,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0.5";
    assert_eq!(root(Some(header)), Ok(BETA));
    let header = "application/json;q=0.9,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0.5";
    // Plain clauses never decide the aggregated question: v2 still wins.
    assert_eq!(root(Some(header)), Ok(V2));
    // An unparsable q counts as 0, and q=0 is still acceptable (as upstream).
    assert_eq!(root(Some("application/json;q=abc")), LEGACY);
    assert_eq!(root(Some("application/json;q=0")), LEGACY);
    let header = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList;q=x,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0.1";
    assert_eq!(root(Some(header)), Ok(V2));
}

#[test]
fn profile_nopeer_is_accepted_and_reported() {
    let header =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer";
    assert_eq!(
        root(Some(header)),
        Ok(Negotiated::Aggregated {
            version: AggregatedVersion::V2,
            no_peer: true,
            format: Format::Json,
        })
    );
    assert_eq!(
        root(Some(header)).map(Negotiated::content_type),
        Ok("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    );
    // Other profiles and unknown parameters are ignored.
    assert_eq!(
        root(Some(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=foo;x=y"
        )),
        Ok(V2)
    );
    assert_eq!(root(Some("application/json;profile=nopeer")), LEGACY);
}

#[test]
fn wildcards() {
    assert_eq!(root(Some("*/*")), LEGACY);
    assert_eq!(root(Some("*")), LEGACY);
    assert_eq!(root(Some("application/*")), LEGACY);
    assert_eq!(
        root(Some(
            "*/*;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        )),
        Ok(V2)
    );
    assert_eq!(
        root(Some(
            "application/*;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        )),
        Ok(V2)
    );
    assert_eq!(root(Some("*/json")), NOT_ACCEPTABLE);
    assert_eq!(root(Some("text/*")), NOT_ACCEPTABLE);
    assert_eq!(group(Some("*/*")), LEGACY);
}

#[test]
fn protobuf_and_yaml_are_not_served() {
    assert_eq!(
        root(Some("application/vnd.kubernetes.protobuf")),
        NOT_ACCEPTABLE
    );
    assert_eq!(
        root(Some("application/vnd.kubernetes.protobuf,application/json")),
        LEGACY
    );
    assert_eq!(root(Some("application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json")), LEGACY);
    assert_eq!(root(Some("application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")), Ok(V2));
    assert_eq!(root(Some("application/yaml")), NOT_ACCEPTABLE);
    assert_eq!(
        NotAcceptable.message(),
        "only the following media types are accepted: application/json, application/cbor"
    );
}

#[test]
fn group_endpoints_never_serve_aggregated() {
    assert_eq!(group(Some(V2_ONLY)), NOT_ACCEPTABLE);
    assert_eq!(group(Some(BETA_ONLY)), NOT_ACCEPTABLE);
    assert_eq!(group(Some(KUBECTL)), LEGACY);
    assert_eq!(group(Some(KUBECTL_127)), LEGACY);
    assert_eq!(group(None), LEGACY);
    assert_eq!(group(Some("application/json")), LEGACY);
    assert_eq!(
        group(Some("application/vnd.kubernetes.protobuf")),
        NOT_ACCEPTABLE
    );
}

#[test]
fn stream_parameter() {
    assert_eq!(root(Some("application/json;stream=watch")), LEGACY);
    assert_eq!(root(Some("application/json;stream=other")), NOT_ACCEPTABLE);
}

#[test]
fn garbage_never_panics() {
    let garbage = [
        ",",
        ",,,",
        ";",
        ";;;",
        "/",
        "//",
        "a/b/c",
        "application/json;;;",
        "application/json;=",
        "application/json;q=",
        "application/json;q=NaN",
        "application/json;q=inf",
        "application/json;q=-1",
        "application/json;g",
        "=;=,=",
        "\u{0}\u{1}",
        "ä/ö;ü=ß",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=1e309",
        "*/*;q=0.5,,,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    ];
    for header in garbage {
        let _ = root(Some(header));
        let _ = root_without_beta(Some(header));
        let _ = group(Some(header));
    }
    assert_eq!(root(Some(",")), NOT_ACCEPTABLE);
    assert_eq!(root(Some("a/b/c")), NOT_ACCEPTABLE);
    assert_eq!(root(Some("application/json;;;")), LEGACY);
    let long = "application/json;".repeat(10_000);
    assert_eq!(root(Some(&long)), LEGACY);
}

#[test]
fn a_repeated_header_gets_the_answer_of_its_own_endpoint_and_options() {
    // The per-thread memo must key on everything the answer depends on.
    for _ in 0..2 {
        assert_eq!(root(Some(KUBECTL_127)), Ok(BETA));
        assert_eq!(root_without_beta(Some(KUBECTL_127)), LEGACY);
        let legacy_only = negotiate(
            Some(KUBECTL_127),
            Endpoint::LegacyOnly,
            &NegotiateOptions::default(),
        );
        assert_eq!(legacy_only, LEGACY);
        assert_eq!(root(Some(BETA_ONLY)), Ok(BETA));
        assert_eq!(root_without_beta(Some(BETA_ONLY)), NOT_ACCEPTABLE);
    }
}
