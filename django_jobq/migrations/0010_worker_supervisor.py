# The supervisor a worker process runs under (jobq_worker --processes), as it last told the process.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobq', '0009_workflows'),
    ]

    operations = [
        migrations.AddField(
            model_name='workerrecord',
            name='supervisor',
            field=models.JSONField(blank=True, help_text='The supervisor that started it (jobq_worker --processes): id, host, pid, started, processes, restarts, recycled, last exit.', null=True),
        ),
    ]
