# Plans the pod-role module with the real AWS provider (offline: fake
# credentials), beside the iam module given the same inputs: the pods are
# granted exactly the instance role's data access, and nothing of what only
# an instance of the Auto Scaling group does. Run by `make tf-validate`.

provider "aws" {
  region                      = "us-east-1"
  access_key                  = "test"
  secret_key                  = "test"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}

override_data {
  target = module.policy.data.aws_partition.current
  values = { partition = "aws" }
}

variables {
  name                    = "fs-pods"
  namespace               = "transcription"
  service_account         = "fs-fleetscribe"
  queue_arns              = ["arn:aws:sqs:us-east-1:000000000000:fs-live", "arn:aws:sqs:us-east-1:000000000000:fs-bulk"]
  input_bucket_arn        = "arn:aws:s3:::fs-in"
  input_prefixes          = ["uploads/"]
  output_bucket_arn       = "arn:aws:s3:::fs-out"
  output_prefix           = "transcripts/"
  kms_key_arns            = ["arn:aws:kms:us-east-1:000000000000:key/data"]
  model_repository_s3_uri = "s3://fs-models/asr/"
  model_kms_key_arn       = "arn:aws:kms:us-east-1:000000000000:key/models"
  oidc_provider_arn       = "arn:aws:iam::000000000000:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE"
}

run "instance_role" {
  command = plan
  module {
    source = "../iam"
  }
  override_data {
    target = data.aws_caller_identity.current
    values = { account_id = "000000000000" }
  }
  variables {
    name                   = "fs-worker"
    autoscaling_group_name = "fs-workers"
    log_group_name         = "/fleetscribe/fs-workers"
  }
}

run "irsa_grants_the_instance_roles_data_access" {
  command = plan
  assert {
    condition     = jsondecode(aws_iam_role_policy.this.policy).Statement == [for s in jsondecode(run.instance_role.worker_policy_json).Statement : s if !contains(["DrainOnScaleIn", "FindOwnGroup", "ScaleInProtectionAndHealth", "PublishBootFailures", "ShipContainerLogs", "PullImages", "EcrLogin"], s.Sid)]
    error_message = "the pods' policy is not the instance role's data access (or the instance role grants data access of its own)"
  }
  assert {
    condition     = !strcontains(aws_iam_role_policy.this.policy, "autoscaling:") && !strcontains(aws_iam_role_policy.this.policy, "ecr:") && !strcontains(aws_iam_role_policy.this.policy, "logs:") && !strcontains(aws_iam_role_policy.this.policy, "cloudwatch:")
    error_message = "the pods are granted what only an instance does"
  }
  assert {
    condition     = jsondecode(aws_iam_role.this.assume_role_policy).Statement[0].Condition.StringEquals["oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE:sub"] == "system:serviceaccount:transcription:fs-fleetscribe"
    error_message = "IRSA trusts more than the release's service account"
  }
  assert {
    condition     = length(aws_eks_pod_identity_association.this) == 0 && length(output.service_account_annotations) == 1 && contains(keys(output.service_account_annotations), "eks.amazonaws.com/role-arn")
    error_message = "IRSA alone: an annotation, no association"
  }
  assert {
    condition     = jsondecode(output.scaler_policy_json).Statement[0].Action == "sqs:GetQueueAttributes" && length(jsondecode(output.scaler_policy_json).Statement) == 1
    error_message = "KEDA's policy grants more than the queues' depth"
  }
}

run "pod_identity" {
  command = plan
  variables {
    oidc_provider_arn         = null
    pod_identity_cluster_name = "gpus"
  }
  assert {
    condition     = aws_eks_pod_identity_association.this[0].service_account == "fs-fleetscribe" && aws_eks_pod_identity_association.this[0].namespace == "transcription"
    error_message = "the association names another service account"
  }
  assert {
    condition     = jsondecode(aws_iam_role.this.assume_role_policy).Statement[0].Principal.Service == "pods.eks.amazonaws.com" && length(output.service_account_annotations) == 0
    error_message = "Pod Identity: trusted by pods.eks.amazonaws.com, no annotation"
  }
}

run "no_trust_refused" {
  command = plan
  variables {
    oidc_provider_arn = null
  }
  expect_failures = [aws_iam_role.this]
}
