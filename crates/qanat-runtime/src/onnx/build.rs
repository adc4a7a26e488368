//! Small ONNX graphs built in code (ONNX's own protobuf types, re-exported as [`pb`]):
//! what the limits' tests and the hostile-model suite upload.

use prost::Message;
pub use tract_onnx::pb;

/// A `float` tensor named `name` of fixed `dims`.
pub fn value(name: &str, dims: &[i64]) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{dimension::Value as D, Dimension};
    pb::ValueInfoProto {
        name: name.into(),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: pb::tensor_proto::DataType::Float as i32,
                shape: Some(pb::TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|d| Dimension {
                            value: Some(D::DimValue(*d)),
                            ..Dimension::default()
                        })
                        .collect(),
                }),
            })),
            ..pb::TypeProto::default()
        }),
        ..pb::ValueInfoProto::default()
    }
}

/// A `float` tensor named `name` of `[N, width]`, its batch dimension symbolic (as
/// exporters write a served model's inputs and outputs).
pub fn batched(name: &str, width: i64) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::dimension::Value as D;
    let mut v = value(name, &[1, width]);
    if let Some(pb::type_proto::Value::TensorType(t)) =
        v.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        if let Some(first) = t.shape.as_mut().and_then(|s| s.dim.first_mut()) {
            first.value = Some(D::DimParam("N".into()));
        }
    }
    v
}

/// An `op` node reading `inputs`, writing `output`.
pub fn node(op: &str, inputs: &[&str], output: &str) -> pb::NodeProto {
    pb::NodeProto {
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..pb::NodeProto::default()
    }
}

/// A chain of `n` `Relu`s from `x` to `y`.
pub fn relu_chain(n: usize) -> Vec<pb::NodeProto> {
    (0..n)
        .map(|i| {
            let input = if i == 0 {
                "x".to_string()
            } else {
                format!("t{i}")
            };
            let output = if i + 1 == n {
                "y".to_string()
            } else {
                format!("t{}", i + 1)
            };
            node("Relu", &[&input], &output)
        })
        .collect()
}

/// `graph` as an ONNX file (IR 8, opset 17).
pub fn model(graph: pb::GraphProto) -> Vec<u8> {
    pb::ModelProto {
        ir_version: 8,
        opset_import: vec![pb::OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(graph),
        ..pb::ModelProto::default()
    }
    .encode_to_vec()
}
