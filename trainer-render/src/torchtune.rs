//! Trainer's torchtune path (kubeflow/trainer v2.3.0
//! `pkg/runtime/framework/plugins/torch/torchtune.go`): a TrainJob whose command is exactly
//! `tune run` gets the rendezvous endpoint, the recipe, `--config <model><suffix>` and the
//! runtime's immutable overrides appended; the webhook checks the model and the recipe.

use api::jobset::ReplicatedJob;
use api::trainer::ANCESTOR_TRAINER;

use crate::pods::{ancestor_of, pod_spec};

pub(crate) const ENTRYPOINT: [&str; 2] = ["tune", "run"];
pub(crate) const ARG_RDZV_ENDPOINT: &str = "--rdzv_endpoint";
const ARG_CONFIG: &str = "--config";

const FULL_SINGLE_DEVICE: &str = "full_finetune_single_device";
const FULL_DISTRIBUTED: &str = "full_finetune_distributed";
const LORA_SINGLE_DEVICE: &str = "lora_finetune_single_device";
const LORA_DISTRIBUTED: &str = "lora_finetune_distributed";

const SUFFIX_FULL_SINGLE_DEVICE: &str = "_full_single_device";
const SUFFIX_FULL_MULTI_DEVICES: &str = "_full";
const SUFFIX_FULL_MULTI_NODES: &str = "_full_multinode";
const SUFFIX_LORA_SINGLE_DEVICE: &str = "_lora_single_device";
pub(crate) const SUFFIX_QLORA_SINGLE_DEVICE: &str = "_qlora_single_device";
const SUFFIX_LORA_DISTRIBUTED: &str = "_lora";
pub(crate) const SUFFIX_QLORA_DISTRIBUTED: &str = "_qlora";

const LORA_ATTN_MODULES: &str = "model.lora_attn_modules";
const QUANTIZE_BASE: &str = "model.quantize_base";
const USE_DORA: &str = "model.use_dora";

pub(crate) const MODEL_LLAMA3_2_1B: &str = "llama3_2/1B";
pub(crate) const MODEL_LLAMA3_2_3B: &str = "llama3_2/3B";
pub(crate) const MODEL_LLAMA3_3_70B: &str = "llama3_3/70B";
pub(crate) const MODEL_QWEN2_5_1_5B: &str = "qwen2_5/1.5B";
pub(crate) const SUPPORTED_MODELS: [&str; 4] =
    [MODEL_LLAMA3_2_1B, MODEL_LLAMA3_2_3B, MODEL_LLAMA3_3_70B, MODEL_QWEN2_5_1_5B];

/// Configs the runtime owns (`TorchTuneImmutableConfigs`): taken from the runtime's command,
/// never from the TrainJob's args.
pub(crate) const IMMUTABLE_CONFIGS: [&str; 4] =
    ["output_dir", "tokenizer.path", "checkpointer.checkpoint_dir", "tokenizer.merges_file"];

/// `numProcPerNode` as Trainer holds it: an int, or the string `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NProc {
    Int(i64),
    Auto,
}

impl NProc {
    pub(crate) fn to_value_string(self) -> String {
        match self {
            NProc::Int(n) => n.to_string(),
            NProc::Auto => "auto".into(),
        }
    }
}

/// The TrainJob's command is torchtune's bare entrypoint.
pub(crate) fn is_entrypoint(command: Option<&[String]>) -> bool {
    command.is_some_and(|c| c.len() == ENTRYPOINT.len() && c.iter().zip(ENTRYPOINT).all(|(a, b)| a == b))
}

/// `torchtune-llama3.2-1b` → `llama3_2/1B`; anything not of three `-`-separated parts → "".
pub(crate) fn model_from_runtime_ref(name: &str) -> String {
    let fields: Vec<&str> = name.split('-').collect();
    if fields.len() != 3 {
        return String::new();
    }
    format!("{}/{}", fields[1].replace('.', "_"), fields[2].to_uppercase())
}

fn is_lora(args: &[String]) -> bool {
    args.iter().any(|a| a.contains(LORA_ATTN_MODULES))
}

/// `key=value` with `key` containing `item` and a Python-true value.
fn bool_arg(args: &[String], item: &str) -> bool {
    args.iter().any(|a| {
        a.split_once('=').is_some_and(|(name, value)| name.contains(item) && value.trim().eq_ignore_ascii_case("true"))
    })
}

pub(crate) fn is_qlora(args: &[String]) -> bool {
    !bool_arg(args, USE_DORA) && bool_arg(args, QUANTIZE_BASE)
}

pub(crate) fn is_lora_or_qlora(args: &[String]) -> bool {
    is_lora(args) || is_qlora(args)
}

/// `getRecipeAndConfig`: the recipe and the config name for the model the runtime is named after.
pub(crate) fn recipe_and_config(
    num_nodes: i64,
    nproc: NProc,
    gpus: i64,
    args: &[String],
    runtime_ref_name: &str,
) -> (&'static str, String) {
    let (recipe, suffix) = if num_nodes == 1 && (nproc == NProc::Int(1) || gpus == 1) {
        if is_qlora(args) {
            (LORA_SINGLE_DEVICE, SUFFIX_QLORA_SINGLE_DEVICE)
        } else if is_lora(args) {
            (LORA_SINGLE_DEVICE, SUFFIX_LORA_SINGLE_DEVICE)
        } else {
            (FULL_SINGLE_DEVICE, SUFFIX_FULL_SINGLE_DEVICE)
        }
    } else if num_nodes == 1 && is_qlora(args) {
        (LORA_DISTRIBUTED, SUFFIX_QLORA_DISTRIBUTED)
    } else if num_nodes == 1 && is_lora(args) {
        (LORA_DISTRIBUTED, SUFFIX_LORA_DISTRIBUTED)
    } else if num_nodes > 1 {
        (FULL_DISTRIBUTED, SUFFIX_FULL_MULTI_NODES)
    } else {
        (FULL_DISTRIBUTED, SUFFIX_FULL_MULTI_DEVICES)
    };
    (recipe, format!("{}{suffix}", model_from_runtime_ref(runtime_ref_name)))
}

/// `extractOverridesFromRuntime`: the runtime's `key=value` command items for the immutable
/// configs, from container `node` of every trainer-ancestor job (before the TrainJob's command
/// replaces it).
pub(crate) fn overrides_from_runtime(jobs: &[ReplicatedJob]) -> Vec<String> {
    jobs.iter()
        .filter(|j| ancestor_of(j) == Some(ANCESTOR_TRAINER))
        .filter_map(pod_spec)
        .flat_map(|p| &p.containers)
        .filter(|c| c.name == "node")
        .flat_map(|c| c.command.iter().flatten())
        .filter(|item| IMMUTABLE_CONFIGS.contains(&item.split('=').next().unwrap_or_default()))
        .cloned()
        .collect()
}

/// The command Trainer runs: the entrypoint, the rendezvous endpoint on the trainer's first pod
/// when more than one process takes part, the recipe and config, then the runtime's overrides.
pub(crate) fn command(
    rdzv_endpoint: &str,
    (num_nodes, nproc, gpus): (i64, NProc, i64),
    args: &[String],
    runtime_ref_name: &str,
    overrides: Vec<String>,
) -> Vec<String> {
    let mut cmd: Vec<String> = ENTRYPOINT.iter().map(|s| s.to_string()).collect();
    let distributed = num_nodes > 1 || matches!(nproc, NProc::Int(n) if n > 1) || (nproc == NProc::Auto && gpus > 1);
    if distributed {
        cmd.push(format!("{ARG_RDZV_ENDPOINT}={rdzv_endpoint}"));
    }
    let (recipe, config) = recipe_and_config(num_nodes, nproc, gpus, args, runtime_ref_name);
    cmd.extend([recipe.to_string(), ARG_CONFIG.to_string(), config]);
    cmd.extend(overrides);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    /// kubeflow/trainer v2.3.0 `pkg/runtime/framework/plugins/torch/torchtune_test.go`,
    /// `TestGetModelFromRuntimeRef`.
    #[test]
    fn get_model_from_runtime_ref() {
        assert_eq!(model_from_runtime_ref("torchtune-llama3.2-1b"), "llama3_2/1B");
        assert_eq!(model_from_runtime_ref("torchtune-qwen2.5-1.5b"), "qwen2_5/1.5B");
        assert_eq!(model_from_runtime_ref("torchtune-llama3.2"), "");
        assert_eq!(model_from_runtime_ref("torchtune-llama3.2-1b-extra"), "");
        assert_eq!(model_from_runtime_ref(""), "");
    }

    /// `TestIsUseQLoraFinetune` and `TestIsLoraConfigEnabled` (same file).
    #[test]
    fn lora_and_qlora_detection() {
        assert!(is_lora(&args(&["model.lora_attn_modules=[q_proj,v_proj]"])));
        assert!(!is_lora(&args(&["epochs=1"])));
        assert!(!is_lora(&[]));
        assert!(is_qlora(&args(&["model.quantize_base=True"])));
        assert!(!is_qlora(&args(&["model.quantize_base=False"])));
        assert!(!is_qlora(&args(&["model.quantize_base=True", "model.use_dora=True"])));
        assert!(is_qlora(&args(&["model.quantize_base=True", "model.use_dora=False"])));
        assert!(!is_qlora(&args(&["epochs=1"])));
        assert!(!is_qlora(&[]));
    }

    /// `TestGetRecipeAndConfig` (same file), every case.
    #[test]
    fn get_recipe_and_config() {
        let rt = "torchtune-llama3.2-1b";
        let lora = args(&["model.lora_attn_modules=['q_proj']"]);
        let qlora = args(&["model.quantize_base=True"]);
        type Case<'a> = (&'a str, i64, NProc, i64, &'a [String], &'a str, &'a str);
        let cases: [Case<'_>; 9] = [
            ("single device full", 1, NProc::Auto, 1, &[], FULL_SINGLE_DEVICE, "llama3_2/1B_full_single_device"),
            ("single device lora", 1, NProc::Auto, 1, &lora, LORA_SINGLE_DEVICE, "llama3_2/1B_lora_single_device"),
            ("single device qlora", 1, NProc::Auto, 1, &qlora, LORA_SINGLE_DEVICE, "llama3_2/1B_qlora_single_device"),
            ("single node multi-gpu full", 1, NProc::Auto, 4, &[], FULL_DISTRIBUTED, "llama3_2/1B_full"),
            ("single node multi-gpu lora", 1, NProc::Auto, 4, &lora, LORA_DISTRIBUTED, "llama3_2/1B_lora"),
            ("single node multi-gpu qlora", 1, NProc::Auto, 4, &qlora, LORA_DISTRIBUTED, "llama3_2/1B_qlora"),
            ("multi-node full", 2, NProc::Auto, 8, &[], FULL_DISTRIBUTED, "llama3_2/1B_full_multinode"),
            (
                "numProcPerNode=1 forces single device even with multiple gpus",
                1,
                NProc::Int(1),
                4,
                &[],
                FULL_SINGLE_DEVICE,
                "llama3_2/1B_full_single_device",
            ),
            ("numProcPerNode>1 uses distributed", 1, NProc::Int(4), 4, &[], FULL_DISTRIBUTED, "llama3_2/1B_full"),
        ];
        for (name, nodes, nproc, gpus, a, recipe, config) in cases {
            assert_eq!(recipe_and_config(nodes, nproc, gpus, a, rt), (recipe, config.to_string()), "{name}");
        }
    }

    /// `TestExtractOverridesFromRuntime` (same file), every case.
    #[test]
    fn extract_overrides_from_runtime() {
        let job = |ancestor: &str, container: &str| -> ReplicatedJob {
            serde_json::from_value(serde_json::json!({
                "name": "node",
                "template": {
                    "metadata": {"labels": {api::trainer::ANCESTOR_LABEL: ancestor}},
                    "spec": {"template": {"spec": {"containers": [{
                        "name": container,
                        "command": ["output_dir=/out", "tokenizer.path=/tok", "batch_size=32"]
                    }]}}}
                }
            }))
            .expect("replicated job")
        };
        assert!(overrides_from_runtime(&[]).is_empty(), "no jobset template");
        assert_eq!(
            overrides_from_runtime(&[job("trainer", "node")]),
            ["output_dir=/out", "tokenizer.path=/tok"],
            "trainer node container returns only immutable configs"
        );
        assert!(overrides_from_runtime(&[job("other", "node")]).is_empty(), "non-trainer ancestor is ignored");
        assert!(overrides_from_runtime(&[job("trainer", "sidecar")]).is_empty(), "non-node container is ignored");
    }
}
