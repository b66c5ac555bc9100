use std::path::Path;

use super::*;

#[test]
fn instance_list_json_as_apptainer_prints_it() {
    let text = "{\n\t\"instances\": [\n\t\t{\n\t\t\t\"instance\": \"caduceus_ab_cd\",\n\t\t\t\"pid\": 11963,\n\t\t\t\"img\": \"/c/x.sif\",\n\t\t\t\"ip\": \"\",\n\t\t\t\"logErrPath\": \"/l.err\",\n\t\t\t\"logOutPath\": \"/l.out\"\n\t\t}\n\t]\n}\n";
    let list = parse_instance_list(text).unwrap();
    assert_eq!(
        list,
        vec![InstanceInfo {
            instance: "caduceus_ab_cd".into(),
            pid: 11963,
            img: "/c/x.sif".into()
        }]
    );
    assert_eq!(
        parse_instance_list("{\n\t\"instances\": []\n}\n").unwrap(),
        vec![]
    );
    assert_eq!(
        parse_instance_list("{\"instances\": null}").unwrap(),
        vec![]
    );
    assert_eq!(parse_instance_list("").unwrap(), vec![]);
    assert!(parse_instance_list("INSTANCE NAME    PID").is_err());
}

#[test]
fn start_arguments_follow_hermes_order() {
    let spec = StartSpec {
        image: "/c/img.sif".into(),
        name: "caduceus_w_e".into(),
        overlay: None,
        binds: vec!["/data:/data:ro".into()],
        memory_mb: 5120,
        cpus: 1.0,
    };
    assert_eq!(
        spec.args().join(" "),
        "instance start --containall --no-home --writable-tmpfs --bind /data:/data:ro --memory 5120M --cpus 1 /c/img.sif caduceus_w_e"
    );
    let spec = StartSpec {
        overlay: Some("/s/overlays/overlay-t".into()),
        memory_mb: 0,
        cpus: 0.0,
        binds: vec![],
        ..spec
    };
    assert_eq!(
        spec.args().join(" "),
        "instance start --containall --no-home --overlay /s/overlays/overlay-t /c/img.sif caduceus_w_e"
    );
}

#[test]
fn docker_images_map_to_cached_sif_files() {
    let cache = Path::new("/cache");
    assert_eq!(
        sif_path_for("docker://nikolaik/python-nodejs:python3.11-nodejs20", cache).unwrap(),
        Path::new("/cache/nikolaik-python-nodejs-python3.11-nodejs20.sif")
    );
    assert_eq!(sif_path_for("/images/x.sif", cache), None);
    assert_eq!(sif_path_for("library://x/y", cache), None);
}
