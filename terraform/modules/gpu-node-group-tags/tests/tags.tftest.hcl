# Plans the module with the real AWS provider (offline). Run by
# `make tf-validate`; deploy/helm's TestNodeGroupTagsScaleFromZero checks
# that a node built from these tags takes each plan's pod.

provider "aws" {
  region                      = "us-east-1"
  access_key                  = "test"
  secret_key                  = "test"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}

variables {
  autoscaling_group_names = ["eks-gpu-a", "eks-gpu-b"]
  cluster_name            = "prod"
  gpus                    = 4
}

run "mps_whole_gpus" {
  command = plan
  variables {
    sharing = "mps"
  }
  assert {
    condition = (output.tags["k8s.io/cluster-autoscaler/node-template/label/nvidia.com/gpu.count"] == "4"
      && output.tags["k8s.io/cluster-autoscaler/node-template/label/nvidia.com/gpu.sharing-strategy"] == "none"
    && output.tags["k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"] == "4")
    error_message = "an mps plan's template node is not 4 unshared GPUs"
  }
  assert {
    condition     = length(aws_autoscaling_group_tag.this) == 2 * 6 && alltrue([for t in aws_autoscaling_group_tag.this : !t.tag[0].propagate_at_launch])
    error_message = "every group does not carry every tag, or the tags reach the nodes"
  }
}

run "device_plugin_replicas" {
  command = plan
  variables {
    sharing          = "device-plugin-timeslicing"
    replicas_per_gpu = 4
    gpu_taint        = false
    cluster_name     = null
  }
  assert {
    condition = (output.tags["k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"] == "16"
      && output.tags["k8s.io/cluster-autoscaler/node-template/label/nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    && length(output.tags) == 3)
    error_message = "a time-sliced plan's template node does not offer the device plugin's replicas, or carries tags not asked for"
  }
}

run "device_plugin_needs_replicas" {
  command = plan
  variables {
    sharing = "device-plugin-mps"
  }
  expect_failures = [aws_autoscaling_group_tag.this]
}

run "gpus_of_no_plan_refused" {
  command = plan
  variables {
    gpus    = 2
    sharing = "mps"
  }
  expect_failures = [var.gpus]
}
